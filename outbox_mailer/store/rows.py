"""Claimed rows into :class:`Delivery` values, one row at a time, never failing the batch.

A claim commits before its rows are decoded, so a value that no decoder
handles must not take the other rows of the batch down with it (they would
stay ``sending`` until the rescuer, which would read the same row again). The
claim queries therefore return timestamps as epoch seconds and JSON as text;
each row is decoded here on its own, and a row that cannot be becomes a
:class:`Delivery` with ``defect`` set, which the daemon fails alone with the
field named. The schema refuses such values at INSERT since version 6; this is
the second line, for rows written before it or past its checks.

``expires_at = 'infinity'`` means "never expires" (as null does).
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

import asyncpg

from ..delivery import Delivery, ProviderTemplate, TemplateRef

_EPOCH_FALLBACK = datetime(1970, 1, 1, tzinfo=UTC)


class _Unreadable(ValueError):
    pass


def _instant(row: asyncpg.Record, field: str, *, infinity_is_none: bool = False) -> datetime | None:
    seconds = row[field]
    if seconds is None or (infinity_is_none and seconds == math.inf):
        return None
    try:  # what instant_or_none() does, without its call: infinities and NaN raise here too
        return datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, ValueError, OSError):
        raise _Unreadable(f"{field}: timestamp out of range ({seconds:g} s from 1970)") from None


def _required_instant(row: asyncpg.Record, field: str) -> datetime:
    """A NOT NULL column's instant (a null one would be a broken schema: the row is unreadable)."""
    instant = _instant(row, field)
    if instant is None:
        raise _Unreadable(f"{field}: null")
    return instant


def instant_or_none(seconds: float | None) -> datetime | None:
    """Epoch seconds from the database as a datetime; None when absent or not representable."""
    if seconds is None or not math.isfinite(seconds):
        return None
    try:
        return datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, ValueError, OSError):
        return None


# What most rows hold (jsonb's text of an empty object or array): no parse needed. Each row
# gets a value of its own, as json.loads would give it.
_EMPTY_JSON = {"{}": dict, "[]": list}


def _json(row: asyncpg.Record, field: str, kind: type) -> Any:
    text = row[field]
    empty = _EMPTY_JSON.get(text) if type(text) is str else None
    if empty is not None:
        value = empty()
    else:
        try:
            value = json.loads(text)
        except RecursionError:
            raise _Unreadable(f"{field}: JSON nested too deeply to decode") from None
        except ValueError as exc:  # a number too long to convert, invalid text
            raise _Unreadable(f"{field}: JSON cannot be decoded: {exc}") from None
    if not isinstance(value, kind):
        raise _Unreadable(f"{field}: expected a JSON {'object' if kind is dict else 'array'}")
    return value


def delivery_from_row(row: asyncpg.Record, max_content_bytes: int) -> Delivery:
    """Decode one claimed row; a row that cannot be sent as read comes back with ``defect`` set."""
    try:
        scheduled_at = _required_instant(row, "scheduled_at")
        expires_at = _instant(row, "expires_at", infinity_is_none=True)
        created_at = _required_instant(row, "created_at")
        first_attempt_at = _instant(row, "first_attempt_at")
    except _Unreadable as exc:
        return _defective(_base(row), str(exc))
    retry = row["retry_recipients"]
    retry_recipients = tuple(retry) if retry is not None else None
    subject, template = row["subject"], row.get("template")  # None: read without the template columns
    provider_template = row.get("provider_template")
    # left out by the claim: too large (a provider template's model may be null; its recipients never are)
    if (row["to_addresses"] if provider_template is not None else subject if template is None
            else row["template_data"]) is None:
        return _defective(
            {**_base(row), "scheduled_at": scheduled_at, "expires_at": expires_at, "created_at": created_at,
             "first_attempt_at": first_attempt_at, "retry_recipients": retry_recipients},
            f"content: {row['content_bytes']} bytes, over the limit of {max_content_bytes} "
            "(max_message_bytes); not loaded",
        )
    try:
        headers = _json(row, "headers", dict)
        attachments = _json(row, "attachments", list)
        metadata = _json(row, "metadata", dict)
        named = None if template is None else _template(row)
        provider = None if provider_template is None else ProviderTemplate(
            provider_template, _json(row, "template_data", dict) if row["template_data"] is not None else {})
    except _Unreadable as exc:
        return _defective(
            {**_base(row), "scheduled_at": scheduled_at, "expires_at": expires_at, "created_at": created_at,
             "first_attempt_at": first_attempt_at, "retry_recipients": retry_recipients},
            str(exc),
        )
    return Delivery(
        id=row["id"], dedupe_key=row["dedupe_key"], claim_token=row["claim_token"], attempts=row["attempts"],
        max_attempts=row["max_attempts"], from_address=row["from_address"],
        to_addresses=tuple(row["to_addresses"]), cc_addresses=tuple(row["cc_addresses"]),
        bcc_addresses=tuple(row["bcc_addresses"]), reply_to=row["reply_to"], subject=subject or "",
        text_body=row["text_body"], html_body=row["html_body"], headers=headers, attachments=attachments,
        metadata=metadata, transport=row["transport"], priority=row["priority"], scheduled_at=scheduled_at,
        expires_at=expires_at, created_at=created_at, first_attempt_at=first_attempt_at,
        retry_recipients=retry_recipients, message_id=row["message_id"],
        pinned_transport=row["pinned_transport"], traceparent=row["traceparent"],
        unsubscribe_category=row.get("unsubscribe_category"),  # the claim returns it (schema 28)
        listed=(*row["to_addresses"], *row["cc_addresses"], *row["bcc_addresses"]), template=named,
        provider_template=provider, content_bytes=row["content_bytes"] or 0,
    )


def _template(row: asyncpg.Record) -> TemplateRef:
    """The stored template a row names, with the locale and version its INSERT resolved."""
    if row["locale"] is None or row["template_version"] is None:
        raise _Unreadable("template: no version was resolved for it (written past the INSERT's trigger)")
    return TemplateRef(row["template"], row["locale"], row["template_version"], _json(row, "template_data", dict))


def _base(row: asyncpg.Record) -> dict[str, Any]:
    """What a defective row keeps: what deciding its outcome needs."""
    return {
        "id": row["id"],
        "dedupe_key": row["dedupe_key"],
        "claim_token": row["claim_token"],
        "attempts": row["attempts"],
        "max_attempts": row["max_attempts"],
        "transport": row["transport"],
        "priority": row["priority"],
    }


def _defective(base: dict[str, Any], defect: str) -> Delivery:
    """A row failed unread: only what deciding its outcome needs, the content left empty."""
    return Delivery(
        **{"scheduled_at": _EPOCH_FALLBACK, "created_at": _EPOCH_FALLBACK, "expires_at": None, **base},
        from_address=None, to_addresses=(), cc_addresses=(), bcc_addresses=(), reply_to=None, subject="",
        text_body=None, html_body=None, headers={}, attachments=[], metadata={}, defect=defect,
    )
