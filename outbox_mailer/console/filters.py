"""The email list's query parameters: parsed and checked (:class:`Malformed`, a 400, for anything off),
and written back into the links of the next page and of the bulk forms."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from urllib.parse import urlencode

from ..delivery import Status
from ..store.console import EmailFilter

STATUSES = tuple(s.value for s in Status)
EVENTS = ("delivered", "delayed", "bounced", "complained")  # email_deliveries.delivery_event
ORDERS = ("newest", "oldest")
FILTER_FIELDS = ("status", "transport", "recipient", "key", "created_after", "created_before", "event", "order")
_LIMITS = {"transport": 64, "recipient": 320, "key": 255}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_ID = 2**63 - 1  # a bigint
_CURSOR = re.compile(r"^(-?\d{1,19})\.(\d{1,19})$")


class Malformed(ValueError):
    """A filter or form field that cannot be right; the console answers 400 with this text."""


def _text(params: Mapping[str, str], name: str) -> str | None:
    value = params.get(name, "")
    if value == "":
        return None
    if len(value) > _LIMITS.get(name, 64) or _CONTROL.search(value):
        raise Malformed(f"{name}: at most {_LIMITS.get(name, 64)} characters, no control characters")
    return value


def _choice(params: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str | None:
    value = params.get(name, "")
    if value == "":
        return None
    if value not in choices:
        raise Malformed(f"{name}: one of {', '.join(choices)}")
    return value


def parse_time(name: str, value: str) -> datetime:
    """``2026-12-04``, ``2026-12-04T10:00`` (UTC) or with an offset."""
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise Malformed(f"{name}: a date or time such as 2026-12-04 or 2026-12-04T10:00:00+01:00") from None
    if not 1900 <= when.year < 9999:
        raise Malformed(f"{name}: a year from 1900 to 9998")
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def parse_filter(params: Mapping[str, str]) -> EmailFilter:
    """The filter of a query string or form (empty fields: not filtered on)."""
    after = _text(params, "created_after")
    before = _text(params, "created_before")
    return EmailFilter(
        status=_choice(params, "status", STATUSES),
        transport=_text(params, "transport"),
        recipient=_text(params, "recipient"),
        key=_text(params, "key"),
        created_after=parse_time("created_after", after) if after else None,
        created_before=parse_time("created_before", before) if before else None,
        event=_choice(params, "event", EVENTS),
        oldest_first=_choice(params, "order", ORDERS) == "oldest",
    )


def parse_cursor(value: str | None) -> tuple[datetime, int] | None:
    """``after``: the keyset of the next page, ``<microseconds since 1970>.<id>``."""
    if not value:
        return None
    match = _CURSOR.match(value)
    if match is None:
        raise Malformed("after: not a page position of this console")
    try:
        when = datetime.fromtimestamp(int(match.group(1)) / 1_000_000, UTC)
    except (OverflowError, OSError, ValueError):
        raise Malformed("after: not a page position of this console") from None
    if int(match.group(2)) > MAX_ID:
        raise Malformed("after: not a page position of this console")
    return when, int(match.group(2))


def cursor_text(cursor: tuple[datetime, int]) -> str:
    when, row_id = cursor
    delta = when - datetime(1970, 1, 1, tzinfo=UTC)
    return f"{delta.days * 86_400_000_000 + delta.seconds * 1_000_000 + delta.microseconds}.{row_id}"


def filter_params(f: EmailFilter) -> dict[str, str]:
    """The filter as query parameters (only those set)."""
    out = {"status": f.status, "transport": f.transport, "recipient": f.recipient, "key": f.key,
           "created_after": f.created_after.isoformat() if f.created_after else None,
           "created_before": f.created_before.isoformat() if f.created_before else None,
           "event": f.event, "order": "oldest" if f.oldest_first else None}
    return {k: v for k, v in out.items() if v is not None}


def query_string(f: EmailFilter, **more: str) -> str:
    return urlencode({**filter_params(f), **more})


def parse_count(value: str | None) -> int:
    if value is None or not value.isdigit() or len(value) > 9:
        raise Malformed("expected_count: the number of emails the confirmation showed")
    return int(value)
