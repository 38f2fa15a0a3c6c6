"""Command-line input, parsed strictly: argument types, the ``enqueue --stdin`` object and ``--data``.

Everything here either returns a checked value or raises :class:`UsageError`
(or argparse's ``ArgumentTypeError``, which argparse reports with exit 2);
nothing is coerced. The rules:

* dedupe keys: 1-255 characters, no control characters (the table's CHECK),
  and valid UTF-8 (argv bytes that are not arrive as lone surrogates);
* durations (``--since``): ASCII digits and a unit, at most ten years;
* counts and intervals: finite numbers within a stated range;
* a JSON object (stdin, ``--data``): nested at most :data:`MAX_JSON_DEPTH`
  levels, NaN and Infinity refused;
* the stdin object: at most a size derived from ``max_message_bytes``, UTF-8,
  known fields only, each of its exact type (a string is a string, an integer
  is not a bool or a float, a time is ISO 8601 with an offset).
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

from ..client.emails import dedupe_key_problem as key_problem
from ..errors import OutboxMailerError


class UsageError(OutboxMailerError):
    """Bad command-line input (exit 2)."""


# ---- argument types ------------------------------------------------------------------

_DURATION = re.compile(r"([0-9]{1,12}(?:\.[0-9]{1,6})?)([smhdw])", re.ASCII)
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
MAX_DURATION_SECONDS = 3650 * 86_400  # ten years: the longest retention a setting allows


def dedupe_key(text: str) -> str:
    """A dedupe key as the table accepts it; argparse type."""
    problem = key_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def duration(text: str) -> float:
    """'90s', '15m', '1h', '7d', '2w' -> seconds (ASCII digits; at most ten years)."""
    match = _DURATION.fullmatch(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 90s, 15m, 1h, 7d")
    seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if seconds > MAX_DURATION_SECONDS:
        raise argparse.ArgumentTypeError(f"{text!r} is longer than ten years")
    return seconds


def int_in(low: int, high: int) -> Callable[[str], int]:
    """argparse type: an integer from ``low`` to ``high``."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip()) if text.strip().isascii() else None
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number from {low} to {high}")
        return value

    return parse


def seconds_in(low: float, high: float) -> Callable[[str], float]:
    """argparse type: a finite number of seconds from ``low`` to ``high``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(f"{text!r}: expected a number of seconds from {low:g} to {high:g}")
        return value

    return parse


def parse_time(name: str, value: Any) -> datetime:
    """An ISO 8601 time with an offset (a string), else UsageError naming ``name``."""
    if not isinstance(value, str):
        raise UsageError(f"{name}: expected an ISO 8601 time as a string, got {_kind(value)}")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise UsageError(f"{name}: not an ISO 8601 time: {value!r}") from exc
    if parsed.tzinfo is None:
        raise UsageError(f"{name}: give a time zone, e.g. {value}+00:00")
    return parsed


# ---- enqueue --stdin -------------------------------------------------------------------

# The email object itself is at most three levels deep (object -> attachments
# -> attachment); the rest is room for an application's metadata. Anything
# deeper is refused before parsing: the JSON parser and the jsonb encoder both
# recurse, and a few thousand brackets would otherwise end in a RecursionError.
MAX_JSON_DEPTH = 32
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_JSON_BRACKET = re.compile(r"[\[\]{}]")
SMALLINT = (-32_768, 32_767)  # priority is a smallint
INT4 = (1, 2_147_483_647)  # max_attempts is an int, at least 1
ATTACHMENT_KEYS = ("content_base64", "content_type", "filename")
OPTIONAL_ATTACHMENT_KEY = "content_id"  # an inline part's Content-ID (string or null)

STRING_FIELDS = ("from_address", "reply_to", "text_body", "html_body", "transport",  # string or null
                 "unsubscribe_category", "template", "locale")
ADDRESS_LISTS = ("to_addresses", "cc_addresses", "bcc_addresses")  # list of strings (or one string)
ENQUEUE_FIELDS = frozenset({
    "dedupe_key", "subject", *STRING_FIELDS, *ADDRESS_LISTS, "headers", "attachments", "metadata", "priority",
    "scheduled_at", "expires_at", "max_attempts", "ignore_suppressions", "template_data",
})


def stdin_limit(max_message_bytes: int) -> int:
    """The largest stdin object accepted: twice the largest message, at least 1 MiB.

    A composed message cannot exceed ``max_message_bytes``; its JSON form
    (attachments in base64, escapes) is not much larger, so anything beyond
    twice that could never be sent.
    """
    return max(2 * max_message_bytes, 1024 * 1024)


def read_email(raw: bytes, limit: int) -> dict[str, Any]:
    """Parse and check one ``enqueue --stdin`` object (column names of ``email_deliveries``)."""
    if len(raw) > limit:
        raise UsageError(f"stdin holds more than {limit} bytes; the email could never be sent "
                         "(see OUTBOX_MAILER_MAX_MESSAGE_BYTES)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"stdin is not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    return checked_email(json_object("stdin", text))


def json_object(source: str, text: str) -> dict[str, Any]:
    """One JSON object read from ``source`` (stdin, ``--data``): nested at most :data:`MAX_JSON_DEPTH`
    levels, NaN and Infinity refused; else UsageError naming ``source``."""
    depth = json_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise UsageError(f"{source} is nested {depth} levels deep; at most {MAX_JSON_DEPTH} are allowed")

    def refuse_constant(name: str) -> Any:
        raise UsageError(f"{source} holds {name}: JSON has no such number")

    try:
        data = json.loads(text, parse_constant=refuse_constant)
    except UsageError:
        raise
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, or an integer of over 4300 digits
        raise UsageError(f"{source} is not one JSON object: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{source} must hold one JSON object, not {_kind(data)}")
    return data


def json_depth(text: str) -> int:
    """How deeply ``text``'s arrays and objects nest (strings skipped); no recursion."""
    depth = deepest = 0
    for bracket in _JSON_BRACKET.findall(_JSON_STRING.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def checked_email(data: dict[str, Any]) -> dict[str, Any]:
    """Each field of its exact type, or UsageError naming the field."""
    unknown = sorted(set(data) - ENQUEUE_FIELDS)
    if unknown:
        raise UsageError(f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(ENQUEUE_FIELDS))}")
    # a row that names a template gives no subject of its own (the INSERT checks the rest of that rule)
    required = ("to_addresses",) if data.get("template") is not None else ("subject", "to_addresses")
    for name in required:
        if name not in data:
            raise UsageError(f"field {name!r} is required")
    email: dict[str, Any] = {}
    for name, value in data.items():
        if value is None and name not in ("dedupe_key", *required):
            email[name] = None  # the column's default
            continue
        email[name] = _CHECKS[name](name, value)
    return email


def _string(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise UsageError(f"{name}: expected a string, got {_kind(value)}")
    return value


def _key(name: str, value: Any) -> str:
    key = _string(name, value)
    problem = key_problem(key)
    if problem:
        raise UsageError(f"{name}: {problem}")
    return key


def _address_list(name: str, value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise UsageError(f"{name}: expected a list of strings, got {_kind(value)}")
    for index, item in enumerate(value):
        _string(f"{name}[{index}]", item)
    return value


def _string_object(name: str, value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise UsageError(f"{name}: expected an object, got {_kind(value)}")
    for key, item in value.items():
        _string(f"{name}.{key}", item)
    return value


def _object(name: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise UsageError(f"{name}: expected an object, got {_kind(value)}")
    return value


def _attachments(name: str, value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list):
        raise UsageError(f"{name}: expected a list of objects, got {_kind(value)}")
    for index, item in enumerate(value):
        field = f"{name}[{index}]"
        if not isinstance(item, dict):
            raise UsageError(f"{field}: expected an object, got {_kind(item)}")
        if sorted(set(item) - {OPTIONAL_ATTACHMENT_KEY}) != list(ATTACHMENT_KEYS):
            raise UsageError(f"{field}: expected exactly the keys {', '.join(ATTACHMENT_KEYS)} "
                             f"(and, for an inline part, {OPTIONAL_ATTACHMENT_KEY}); "
                             f"got {', '.join(sorted(map(str, item))) or 'none'}")
        for key, part in item.items():
            if key != OPTIONAL_ATTACHMENT_KEY or part is not None:
                _string(f"{field}.{key}", part)
    return value


def _integer(bounds: tuple[int, int]) -> Callable[[str, Any], int]:
    def check(name: str, value: Any) -> int:
        if type(value) is not int:  # bool is an int subclass, 1.0 is a float: both refused
            raise UsageError(f"{name}: expected a whole number, got {_kind(value)}")
        if not bounds[0] <= value <= bounds[1]:
            raise UsageError(f"{name}: {value} is outside {bounds[0]}..{bounds[1]}")
        return value

    return check


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    names = {str: "a string", int: "an integer", float: "a number with a fraction", list: "a list",
             dict: "an object"}
    kind = names.get(type(value), type(value).__name__)
    return f"{kind} ({value!r})" if isinstance(value, int | float) else kind


def _boolean(field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise UsageError(f"{field}: expected true or false, got {_kind(value)}")
    return value


_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "dedupe_key": _key,
    "subject": _string,
    **{name: _string for name in STRING_FIELDS},
    **{name: _address_list for name in ADDRESS_LISTS},
    "headers": _string_object,
    "attachments": _attachments,
    "metadata": _object,
    "template_data": _object,
    "priority": _integer(SMALLINT),
    "max_attempts": _integer(INT4),
    "scheduled_at": parse_time,
    "expires_at": parse_time,
    "ignore_suppressions": _boolean,
}
