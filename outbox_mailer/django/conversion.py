"""A Django email message as the :class:`~outbox_mailer.client.Email` the outbox holds, or :class:`InvalidEmail`.

What a message carries and where it goes (docs/django.md has the table):

* ``subject``, ``from_email`` (Django fills ``DEFAULT_FROM_EMAIL`` in), ``to``, ``cc``, ``bcc``;
  ``reply_to``: the table holds one Reply-To address, so two or more are refused.
* the body and ``alternatives``: each is ``text/plain`` (``text``) or ``text/html`` (``html``), at most one of
  each; the body's type is ``text/<content_subtype>``. An empty plain body beside an HTML one is no text (the
  daemon writes the text alternative from the HTML). Any other type is refused.
* ``attachments``: ``(filename, content, mimetype)`` triples (a ``str`` content encoded in the message's
  ``encoding``, else ``DEFAULT_CHARSET``; a missing mimetype guessed from the filename as Django does) and
  ``MIMEBase`` parts (their decoded payload); a part with a ``Content-ID`` is inline (``content_id``).
* a stored template (docs/templates.md): ``Outbox-Template`` names it, ``Outbox-Template-Data`` gives its data (a
  JSON object), ``Outbox-Locale`` its locale; the message's subject and body are then left empty (a non-empty
  one is refused: a row gives its own content or a template).
* ``extra_headers``: ``Outbox-*`` headers are ours and never sent (:data:`OUTBOX_HEADERS`); ``From`` and
  ``Reply-To``, which Django lets a header override, become the sender and the Reply-To; ``To`` and ``Cc``,
  which Django writes in the headers only, cannot differ from the recipients (the table's To and Cc headers
  are its recipients) and are refused when they do; the rest go to ``headers``, where the client refuses
  the ones the daemon writes itself (Date, Message-ID, MIME-Version, Content-* ...).

Nothing is dropped silently: what cannot be carried raises :class:`InvalidEmail` naming what.
"""

from __future__ import annotations

import json
import mimetypes
import uuid
from collections.abc import Callable
from datetime import datetime
from email.message import Message
from email.mime.base import MIMEBase
from email.utils import getaddresses
from typing import Any

from django.conf import settings
from django.core.mail import EmailMessage

from ..client import Attachment, Email, InvalidEmail

__all__ = ["DEDUPE_KEY_HEADER", "OUTBOX_HEADERS", "email_from_message"]

DEDUPE_KEY_HEADER = "Outbox-Dedupe-Key"
DEFAULT_ATTACHMENT_TYPE = "application/octet-stream"  # Django's DEFAULT_ATTACHMENT_MIME_TYPE


def _text(value: object) -> str:
    return value if isinstance(value, str) else str(value)


def _whole_number(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    try:
        return int(_text(value).strip())
    except ValueError:
        raise ValueError(f"{value!r} is not a whole number") from None


def _time(value: object) -> datetime:
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(_text(value).strip())
    except ValueError:
        raise ValueError(f"{value!r} is not an ISO 8601 time such as 2026-12-05T09:00:00+00:00") from None


def _json_object(value: object) -> dict[str, Any]:
    try:
        data = json.loads(_text(value))
    except ValueError:
        raise ValueError(f"{value!r:.80} is not JSON") from None
    if not isinstance(data, dict):
        raise ValueError("a JSON object is required, like {\"name\": \"Ann\"}")
    return data


# The message headers that set a column of the row instead of being sent: header (lower case) -> the
# Email field and how its value is read. Any other Outbox-* header is refused (a misspelt one would be sent).
OUTBOX_HEADERS: dict[str, tuple[str, Callable[[object], Any]]] = {
    DEDUPE_KEY_HEADER.lower(): ("dedupe_key", _text),
    "outbox-transport": ("transport", _text),
    "outbox-priority": ("priority", _whole_number),
    "outbox-scheduled-at": ("scheduled_at", _time),
    "outbox-expires-at": ("expires_at", _time),
    "outbox-max-attempts": ("max_attempts", _whole_number),
    "outbox-template": ("template", _text),
    "outbox-template-data": ("template_data", _json_object),
    "outbox-locale": ("locale", _text),
}


def email_from_message(message: EmailMessage) -> Email:
    """The Email for ``message``: its own key from ``Outbox-Dedupe-Key``, else a new random one."""
    encoding = message.encoding or settings.DEFAULT_CHARSET
    fields: dict[str, Any] = {
        "subject": _text(message.subject),
        "from_address": message.from_email,
        "to": list(message.to),
        "cc": list(message.cc),
        "bcc": list(message.bcc),
        "reply_to": _one_reply_to(list(message.reply_to), "reply_to"),
        **_bodies(message, encoding),
        "attachments": [_attachment(a, encoding, f"attachments[{i}]") for i, a in enumerate(message.attachments)],
    }
    fields.update(_header_fields(message))
    fields.setdefault("dedupe_key", f"django-{uuid.uuid4()}")
    if "template" in fields:  # the template gives the subject and bodies: Django's empty ones are none
        fields.update({name: None for name in ("subject", "text", "html") if not fields[name]})
    return Email(**fields)


def _one_reply_to(addresses: list[str], field: str) -> str | None:
    if len(addresses) > 1:
        raise InvalidEmail(field, f"outbox-mailer holds one Reply-To address, this message has {len(addresses)}")
    return addresses[0] if addresses else None


def _bodies(message: EmailMessage, encoding: str) -> dict[str, str | None]:
    """``text`` and ``html`` from the body and the alternatives."""
    parts: list[tuple[object, object, str]] = [(message.body, f"text/{message.content_subtype}", "body")]
    alternatives: list[tuple[object, object]] = getattr(message, "alternatives", None) or []
    parts += [(content, mimetype, f"alternatives[{i}]") for i, (content, mimetype) in enumerate(alternatives)]
    found: dict[str, str] = {}
    for content, mimetype, field in parts:
        kind = {"text/plain": "text", "text/html": "html"}.get(_text(mimetype).lower())
        if kind is None:
            raise InvalidEmail(field, f"a {mimetype} body cannot be carried: text/plain and text/html can")
        if kind in found:
            raise InvalidEmail(field, f"a second {mimetype} body (the message already has one)")
        try:
            found[kind] = content.decode(encoding) if isinstance(content, bytes) else _text(content)
        except UnicodeDecodeError as exc:
            raise InvalidEmail(field, f"not {encoding} text at byte {exc.start}") from None
    if "html" in found and not found.get("text"):
        found.pop("text", None)  # Django's empty body beside an HTML alternative: no text part of its own
    return {"text": found.get("text"), "html": found.get("html")}


def _attachment(item: object, encoding: str, field: str) -> Attachment:
    if isinstance(item, MIMEBase):
        return _mime_part(item, field)
    if not isinstance(item, tuple) or len(item) != 3:
        raise InvalidEmail(field, f"expected (filename, content, mimetype) or a MIME part, got {item!r:.80}")
    filename, content, mimetype = item  # Django's EmailAttachment, or a tuple given to its constructor
    if not filename or not isinstance(filename, str):
        raise InvalidEmail(f"{field}.filename", "an attachment needs a filename")
    content_type = mimetype or mimetypes.guess_type(filename)[0] or DEFAULT_ATTACHMENT_TYPE
    if isinstance(content, str):
        try:
            data = content.encode(encoding)
        except UnicodeEncodeError as exc:
            raise InvalidEmail(f"{field}.content", f"{encoding} cannot hold {exc.object[exc.start]!r}: "
                                                   "give bytes, or set the message's encoding") from None
    elif isinstance(content, bytes | bytearray | memoryview):
        data = bytes(content)
    elif isinstance(content, Message | EmailMessage):
        raise InvalidEmail(f"{field}.content", "an attached message (message/rfc822) cannot be carried")
    else:
        raise InvalidEmail(f"{field}.content", f"expected str or bytes, got {type(content).__name__}")
    return Attachment(filename=filename, content=data, content_type=content_type)


def _mime_part(part: MIMEBase, field: str) -> Attachment:
    """A MIME part given whole: its decoded payload; with a ``Content-ID`` it is shown inline."""
    data = part.get_payload(decode=True)
    if part.is_multipart() or not isinstance(data, bytes):
        raise InvalidEmail(field, f"a {part.get_content_type()} part cannot be carried: give a single-part one")
    content_id = part.get("Content-ID")
    filename = part.get_filename() or (content_id.strip().strip("<>") if content_id else None)
    if not filename:
        raise InvalidEmail(f"{field}.filename", "a part without Content-ID needs a filename (Content-Disposition)")
    if content_id is None:
        return Attachment(filename=filename, content=data, content_type=part.get_content_type())
    return Attachment(filename=filename, content=data, content_type=part.get_content_type(),
                      content_id=content_id.strip().strip("<>"))


def _header_fields(message: EmailMessage) -> dict[str, Any]:
    """The Email fields the message's extra headers give: ``headers`` and those of :data:`OUTBOX_HEADERS`."""
    fields: dict[str, Any] = {}
    headers: dict[str, str] = {}
    for name, value in message.extra_headers.items():
        lower = name.lower()
        if lower in OUTBOX_HEADERS:
            field, read = OUTBOX_HEADERS[lower]
            try:
                fields[field] = read(value)
            except ValueError as exc:
                raise InvalidEmail(f"headers.{name}", str(exc)) from None
        elif lower.startswith("outbox-"):
            known = ", ".join(n.title() for n in OUTBOX_HEADERS)
            raise InvalidEmail(f"headers.{name}", f"not a header outbox-mailer knows ({known})")
        elif lower == "from":
            fields["from_address"] = _text(value)
        elif lower == "reply-to":
            _one_reply_to(_listed(value), f"headers.{name}")  # refuses two or more
            fields["reply_to"] = _text(value).strip() or None
        elif lower in ("to", "cc"):
            _same_recipients(message.to if lower == "to" else message.cc, value, name)
        else:
            headers[name] = _text(value)
    fields["headers"] = headers
    return fields


def _listed(value: object) -> list[str]:
    """The addresses of a header value ("Ann <ann@example.com>, bob@example.com")."""
    return [address for _, address in getaddresses([_text(value)]) if address]


def _same_recipients(recipients: list[str], value: object, name: str) -> None:
    if sorted(a.lower() for a in _listed(value)) != sorted(a.lower() for a in _listed(", ".join(recipients))):
        raise InvalidEmail(f"headers.{name}", f"a {name} header other than the message's recipients cannot be "
                                              f"carried: outbox-mailer writes {name} from them")

