"""The :class:`Email` an application enqueues: checked when it is made, or :class:`InvalidEmail` naming the field.

Its fields are the columns of ``email_deliveries`` in Python's terms (``to`` for ``to_addresses``, ``text`` for
``text_body``, attachments as bytes). An Email that exists passes the INSERT's checks, and the checks the daemon
applies when it composes the message:

* addresses (``to[1]``, ``from_address`` ...): parsed as the composer parses them (``message/addresses.py``);
* headers: names and values as the composer checks them, reserved ones refused (``message/header_fields.py``);
* attachments: a filename of 1-255 characters and a ``type/subtype`` content type, as the composer checks
  them (``message/compose.py``); the content as bytes;
* subject, dedupe key, transport: no control characters; a dedupe key of 1-255 characters, a transport name
  of 1-64 (the table's CHECKs);
* content: a subject with text, html or both; or instead a stored ``template`` (its name, 1-255 characters),
  with ``template_data`` (a dict of JSON values, the template's only context) and a ``locale`` (``pt-BR``);
  or a ``provider_template`` (the alias or id of a template kept at the provider, 1-255 characters) with
  ``template_data`` as its model; exactly one of the three (docs/templates.md). The INSERT refuses a stored
  template that does not exist;
* bodies: no NUL character and nothing that is not Unicode (PostgreSQL's text holds neither);
* times: ``datetime`` with a time zone, from 1900 to before 9999 (the table's range);
* priority a smallint, ``max_attempts`` a positive int4;
* metadata: a dict of JSON values, nested at most 32 levels, numbers finite and within +/-1e300 (the table's
  checks on its JSON columns);
* traceparent: a W3C traceparent, as the INSERT checks it (``tracing/traceparent.py``); None: enqueue takes the
  current OpenTelemetry span's, when the application has one (docs/tracing.md).
* unsubscribe_category: a category as the INSERT checks it (``delivery_events/unsubscribe.py``), on an email of
  one recipient whose headers hold no List-Unsubscribe (docs/unsubscribe.md).

The row is taken when the Email is made (:attr:`Email.row`): changing a dict given to it later changes nothing.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from ..delivery_events.unsubscribe import CATEGORY
from ..delivery_events.unsubscribe import HEADERS as UNSUBSCRIBE_HEADERS
from ..errors import CompositionError, OutboxMailerError
from ..message.addresses import (
    SPECIAL_USE_ALLOWED,
    checked_text,
    find_control_character,
    parse_address,
    parse_address_list,
)
from ..message.attachments import checked_content_id, checked_content_type, checked_filename
from ..message.header_fields import checked_custom_headers
from ..tracing.traceparent import traceparent_problem

__all__ = ["Attachment", "Email", "InvalidEmail", "dedupe_key_problem"]

MAX_KEY_CHARS = 255
MAX_TRANSPORT_CHARS = 64
SMALLINT = (-32_768, 32_767)
INT4 = (1, 2_147_483_647)
MAX_JSON_LEVEL = 32  # the table refuses a JSON value more deeply nested (`strict $.**{33 to last}`)
MAX_JSON_NUMBER = 1e300
EARLIEST = datetime(1900, 1, 1, tzinfo=UTC)  # the table's range for its times
LATEST = datetime(9999, 1, 1, tzinfo=UTC)  # excluded
LOCALE = re.compile(r"[A-Za-z]{2,8}(-[A-Za-z0-9]{1,8})*")  # the form email_templates' locales have (schema 27)
T = TypeVar("T")


class InvalidEmail(OutboxMailerError, ValueError):
    """An :class:`Email` that the table or the daemon would refuse; ``field`` names it (``to[1]``)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file attached to an email."""

    filename: str
    content: bytes
    content_type: str = "application/octet-stream"
    content_id: str | None = None  # shown inline: the HTML refers to it as cid:<content_id> (no angle brackets)


@dataclass(frozen=True, slots=True, kw_only=True)
class Email:
    """One email, checked when it is made (:class:`InvalidEmail` names the first bad field).

    ``None`` for ``from_address``, ``transport``, ``max_attempts`` and ``scheduled_at`` means the daemon's
    configured default sender, default transport, default number of attempts, and now.
    """

    dedupe_key: str
    to: Sequence[str]
    subject: str | None = None  # with text, html or both; None: a template gives them
    text: str | None = None
    html: str | None = None
    cc: Sequence[str] = ()
    bcc: Sequence[str] = ()
    reply_to: str | None = None
    from_address: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    attachments: Sequence[Attachment] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    transport: str | None = None
    priority: int = 0
    scheduled_at: datetime | None = None
    expires_at: datetime | None = None
    max_attempts: int | None = None
    ignore_suppressions: bool = False
    traceparent: str | None = None  # the trace it belongs to; None: the current span's at enqueue, if any
    unsubscribe_category: str | None = None  # one-click unsubscribe from this category (docs/unsubscribe.md)
    template: str | None = None  # a stored template's name, instead of subject, text and html
    template_data: Mapping[str, Any] | None = None  # its variables (None: {}); only with a template
    locale: str | None = None  # pt-BR: then pt, then the template's default locale; only with a template
    # a template kept at the provider (Postmark's alias or id, SendGrid's d-...), rendered there with template_data
    provider_template: str | None = None
    row: dict[str, Any] = field(init=False, repr=False, compare=False)
    """The email as a row of ``email_deliveries``: column names, JSON values (what enqueue writes)."""

    def __post_init__(self) -> None:
        try:
            row = _row(self)
        except CompositionError as exc:  # the composer's own check, which names the field as given here
            raise InvalidEmail(exc.field, exc.reason) from exc
        set_field = object.__setattr__  # frozen: the checked values are set once, here
        for name in ("to", "cc", "bcc", "attachments"):
            set_field(self, name, tuple(_as_list(getattr(self, name))))
        set_field(self, "headers", dict(self.headers))
        set_field(self, "row", row)


def _row(email: Email) -> dict[str, Any]:
    """Every field checked, in the table's column order, as the JSON the INSERT reads."""
    to = _addresses(email.to, "to")
    if not to:
        raise InvalidEmail("to", "at least one recipient is required")
    text, html = _body(email.text, "text"), _body(email.html, "html")
    return {
        "dedupe_key": _dedupe_key(email.dedupe_key),
        "from_address": _address(email.from_address, "from_address"),
        "to_addresses": to,
        "cc_addresses": _addresses(email.cc, "cc"),
        "bcc_addresses": _addresses(email.bcc, "bcc"),
        "reply_to": _address(email.reply_to, "reply_to"),
        **_content(email, text, html),
        "headers": _headers(email.headers),
        "attachments": [_attachment(a, f"attachments[{i}]") for i, a in enumerate(_as_list(email.attachments))],
        "metadata": _metadata(email.metadata),
        "transport": _transport(email.transport),
        "priority": _integer(email.priority, "priority", SMALLINT),
        "scheduled_at": _time(email.scheduled_at, "scheduled_at"),
        "expires_at": _time(email.expires_at, "expires_at"),
        "max_attempts": None if email.max_attempts is None else _integer(email.max_attempts, "max_attempts", INT4),
        "ignore_suppressions": _boolean(email.ignore_suppressions, "ignore_suppressions"),
        "traceparent": _traceparent(email.traceparent),
        "unsubscribe_category": _unsubscribe_category(email),
    }


def _content(email: Email, text: str | None, html: str | None) -> dict[str, Any]:
    """The subject and bodies, a stored template with its data and locale, or a provider's template with its model:
    exactly one (the INSERT's rule)."""
    kinds = [kind for kind in ("template", "provider_template") if getattr(email, kind) is not None]
    if not kinds:
        for name in ("template_data", "locale"):
            if getattr(email, name) is not None:
                raise InvalidEmail(name, "only with a template")
        if text is None and html is None:
            raise InvalidEmail("text", "give text, html or both (or a template)")
        return {"subject": checked_text(email.subject, "subject"), "text_body": text, "html_body": html,
                "template": None, "template_data": None, "locale": None, "provider_template": None}
    kind = kinds[-1]
    if len(kinds) > 1:
        raise InvalidEmail(kind, "give a stored template or a provider's template, not both")
    for name in ("subject", "text", "html"):
        if getattr(email, name) is not None:
            raise InvalidEmail(kind, f"give a template or a subject and body, not both ({name} is given)")
    name = checked_text(getattr(email, kind), kind)
    if not 1 <= len(name) <= MAX_KEY_CHARS:
        raise InvalidEmail(kind, f"a template name has 1-{MAX_KEY_CHARS} characters")
    locale: object = email.locale  # any value a caller passed, checked here
    if locale is not None and kind == "provider_template":
        raise InvalidEmail("locale", "only with a stored template (a provider's template has its own)")
    if locale is not None and not (isinstance(locale, str) and LOCALE.fullmatch(locale)):
        raise InvalidEmail("locale", f"a locale like en or pt-BR, got {email.locale!r}")
    data = {} if email.template_data is None else email.template_data
    if not isinstance(data, Mapping):
        raise InvalidEmail("template_data", f"expected a dict, got {type(data).__name__}")
    return {"subject": None, "text_body": None, "html_body": None, "template": name if kind == "template" else None,
            "template_data": _json_object(data, "template_data", 0), "locale": email.locale,
            "provider_template": name if kind == "provider_template" else None}


def _unsubscribe_category(email: Email) -> str | None:
    """The INSERT's rule (schema 28): a category, one recipient, no List-Unsubscribe of the email's own."""
    category = email.unsubscribe_category
    if category is None:
        return None
    if not CATEGORY.fullmatch(checked_type(category, str, "unsubscribe_category", "a string or None")):
        raise InvalidEmail("unsubscribe_category", "1-64 characters of a-z 0-9 . _ -, starting with a letter or digit")
    if len(_as_list(email.to)) + len(_as_list(email.cc)) + len(_as_list(email.bcc)) != 1:
        raise InvalidEmail("unsubscribe_category", "needs exactly one recipient (to, cc and bcc together)")
    if any(name.lower() in {h.lower() for h in UNSUBSCRIBE_HEADERS} for name in email.headers):
        raise InvalidEmail("headers", "List-Unsubscribe and List-Unsubscribe-Post come from unsubscribe_category")
    return category


def dedupe_key_problem(value: str) -> str | None:
    """Why the table would refuse ``value`` as a dedupe key, or None (the CLI's rule too)."""
    if not value:
        return "a dedupe key may not be empty"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (argv bytes that are not UTF-8 arrive as one)
        return f"dedupe key {value!a} is not valid UTF-8"
    if len(value) > MAX_KEY_CHARS:
        return f"a dedupe key has at most {MAX_KEY_CHARS} characters (this one has {len(value)})"
    bad = find_control_character(value)
    if bad is not None:
        return f"dedupe key {value!r} contains the control character {bad!r}"
    return None


def _dedupe_key(value: object) -> str:
    problem = dedupe_key_problem(checked_type(value, str, "dedupe_key", "a string"))
    if problem:
        raise InvalidEmail("dedupe_key", problem)
    return value  # type: ignore[return-value]  # a str: checked_type() above


def checked_type(value: object, kind: type[T], name: str, described: str) -> T:
    if not isinstance(value, kind):
        raise InvalidEmail(name, f"expected {described}, got {type(value).__name__}")
    return value


def _as_list(value: object) -> list[Any]:
    """A str stands for a list of one (``to="ann@example.com"``); any other sequence is listed."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Sequence):
        return list(value)
    return value  # type: ignore[return-value]  # not a sequence: the checks that follow name it


def _addresses(value: object, name: str) -> list[str]:
    given = _as_list(value)
    parse_address_list(given, name, SPECIAL_USE_ALLOWED)  # a special-use domain: the daemon's setting decides
    return given


def _address(value: object, name: str) -> str | None:
    if value is None:
        return None
    parse_address(value, name, SPECIAL_USE_ALLOWED)
    return value  # type: ignore[return-value]  # a str: parse_address refuses anything else


def _headers(value: object) -> dict[str, str]:
    """As the composer checks a row's headers (which must be a dict: any mapping is copied into one)."""
    return dict(checked_custom_headers(dict(value) if isinstance(value, Mapping) else value))


def _body(value: object, name: str) -> str | None:
    if value is None:
        return None
    body = checked_type(value, str, name, "a string or None")
    if "\x00" in body:
        raise InvalidEmail(name, f"the NUL character at position {body.index(chr(0))} (PostgreSQL's text "
                                 "cannot hold it)")
    try:
        body.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidEmail(name, f"not valid Unicode at position {exc.start}") from exc
    return body


def _attachment(value: object, name: str) -> dict[str, str]:
    attachment = checked_type(value, Attachment, name, "an Attachment")
    content = attachment.content
    if not isinstance(content, bytes | bytearray | memoryview):
        raise InvalidEmail(f"{name}.content", f"expected bytes, got {type(content).__name__}")
    filename = checked_type(attachment.filename, str, f"{name}.filename", "a string")
    content_type = checked_type(attachment.content_type, str, f"{name}.content_type", "a string")
    checked_content_type(content_type, f"{name}.content_type")
    entry = {"filename": checked_filename(filename, f"{name}.filename"), "content_type": content_type,
             "content_base64": base64.b64encode(content).decode("ascii")}
    content_id = checked_content_id(attachment.content_id, f"{name}.content_id")
    if content_id is not None:
        entry["content_id"] = content_id
    return entry


def _traceparent(value: object) -> str | None:
    if value is None:
        return None
    problem = traceparent_problem(checked_type(value, str, "traceparent", "a string or None"))
    if problem:
        raise InvalidEmail("traceparent", problem)
    return value  # type: ignore[return-value]  # a str: checked_type() above


def _transport(value: object) -> str | None:
    if value is None:
        return None
    name = checked_text(value, "transport")
    if not 1 <= len(name) <= MAX_TRANSPORT_CHARS:
        raise InvalidEmail("transport", f"a transport name has 1-{MAX_TRANSPORT_CHARS} characters")
    return name


def _integer(value: object, name: str, bounds: tuple[int, int]) -> int:
    if type(value) is not int:  # a bool is an int, 2.0 a float: both refused
        raise InvalidEmail(name, f"expected a whole number, got {type(value).__name__}")
    if not bounds[0] <= value <= bounds[1]:
        raise InvalidEmail(name, f"{value} is outside {bounds[0]}..{bounds[1]}")
    return value


def _boolean(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidEmail(name, f"expected True or False, got {type(value).__name__}")
    return value


def _time(value: object, name: str) -> str | None:
    if value is None:
        return None
    when = checked_type(value, datetime, name, "a datetime")
    if when.utcoffset() is None:
        raise InvalidEmail(name, "give a time zone (a naive datetime names no instant), e.g. tzinfo=UTC")
    try:
        in_range = EARLIEST <= when < LATEST
    except OverflowError:
        in_range = False
    if not in_range:
        raise InvalidEmail(name, f"{when.isoformat()} is outside 1900-01-01 .. 9999-01-01 (UTC)")
    return when.isoformat()


def _metadata(value: object) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidEmail("metadata", f"expected a dict, got {type(value).__name__}")
    return _json_object(value, "metadata", 0)


def _json_object(value: Mapping[Any, Any], name: str, level: int) -> dict[str, Any]:
    if any(not isinstance(key, str) for key in value):
        raise InvalidEmail(name, "keys must be strings")
    return {key: _json(item, f"{name}.{key}", level + 1) for key, item in value.items()}


def _json(value: object, name: str, level: int) -> Any:
    """A JSON value as the table's checks accept it (a copy), or InvalidEmail."""
    if level > MAX_JSON_LEVEL:
        raise InvalidEmail(name, f"JSON nested more than {MAX_JSON_LEVEL} levels deep")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidEmail(name, f"{value} is not a finite number (JSON has no such number)")
        if abs(value) > MAX_JSON_NUMBER:
            raise InvalidEmail(name, f"a number beyond +/-1e300 (no double holds it): {value:.3g}")
        return value
    if isinstance(value, str):
        return _json_string(value, name)
    if isinstance(value, Mapping):
        for key in value:
            if isinstance(key, str):
                _json_string(key, name)
        return _json_object(value, name, level)
    if isinstance(value, list | tuple):
        return [_json(item, f"{name}[{i}]", level + 1) for i, item in enumerate(value)]
    raise InvalidEmail(name, f"a {type(value).__name__} is not a JSON value")


def _json_string(value: str, name: str) -> str:
    if "\x00" in value:
        raise InvalidEmail(name, "the NUL character (PostgreSQL's jsonb cannot hold it)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidEmail(name, f"not valid Unicode at position {exc.start}") from exc
    return value
