"""A bounce message (RFC 3464 delivery status notification) as an MTA pipes it to ``ingest-dsn``.

Pure: bytes in, :class:`~.model.ProviderEvent` values out (``provider="smtp"``), no I/O.

Parsed with the standard library's ``email`` package, not a bounce library. Its feed parser already
splits a ``message/delivery-status`` body into one header block per field group (RFC 3464 section
2.1), which is all the structure a DSN has; with the lenient ``compat32`` policy it records defects
instead of raising. flufl.bounce (the well-kept choice, Mailman's) answers a different question:
its heuristic detectors return only sets of bouncing addresses, temporary or permanent, with no
Status, Diagnostic-Code or returned Message-ID, and run every detector on every message, so the
returned original can yield bogus matches (its own issue #12). We need the fields, not the guess.

What counts as a DSN: a ``message/delivery-status`` part anywhere in the tree of ``multipart/*``
containers (never inside an attached ``message/rfc822``: a forwarded bounce is not one), or a
``multipart/report; report-type=delivery-status`` without one (a DSN with nothing usable: ``[]``).
Anything else (a reply, an out-of-office, a non-MIME qmail bounce, garbage) is ``None``.

One event per recipient group with a usable address and a known Action:

===========================  ========================================================
Action                       kind, bounce_class
===========================  ========================================================
failed                       BOUNCED, the class of its Status (see below) by the table
                             of ``status_codes.py``: soft, hard or undetermined
delayed                      DELAYED
delivered relayed expanded   DELIVERED
===========================  ========================================================

When Status is the generic ``x.0.0`` (Exim writes ``5.0.0`` for every failure) or missing, the
enhanced code, else the reply code, of an SMTP Diagnostic-Code decides instead: ``5.0.0`` with ``550 5.7.1`` is
undetermined, with ``451 4.4.1`` soft.

``occurred_at``: the group's Last-Attempt-Date, else the DSN's Date (written when the MTA gave up
or warned), else Arrival-Date (only when the original arrived), else ``received_at``.
``provider_event_id``: sha256 hex of the DSN's Message-ID (or of the whole raw bytes when it has
none), the recipient and the action, so the same bounce piped twice records once.

Hostile input: at most :data:`MAX_PARSED_BYTES` are parsed, :data:`MAX_GROUPS` groups read (so one
message plants at most that many events: a real bounce about one of our emails names its recipients,
and one sent per recipient names one), field values cut to 1000 characters; undecodable bytes become U+FFFD,
control characters spaces. The only exception is :class:`ValueError` for a naive ``received_at`` (a caller's
bug, not the input's).
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from email import message_from_bytes
from email.message import Message
from email.parser import BytesHeaderParser
from email.utils import parsedate_to_datetime

from .model import Kind, ProviderEvent
from .status_codes import CODE_PATTERN, Code, bounce_class

__all__ = ["MAX_GROUPS", "MAX_PARSED_BYTES", "parse_dsn"]

MAX_PARSED_BYTES = 10 * 1024 * 1024  # the report comes before the returned message; the rest may go
MAX_GROUPS = 100
_MAX_FIELD_CHARS = 1000
_MAX_DEPTH = 8  # multipart containers around the report
_MAX_PARTS = 256
_MAX_HEADER_BYTES = 256 * 1024  # of a text/rfc822-headers part

_KINDS = {
    "failed": Kind.BOUNCED,
    "delayed": Kind.DELAYED,
    "delivered": Kind.DELIVERED,
    "relayed": Kind.DELIVERED,
    "expanded": Kind.DELIVERED,
}
_STATUS = re.compile(r"\s*" + CODE_PATTERN)
_REPLY = re.compile(r"(?<![\w.])([245])\d\d(?:[ -]+" + CODE_PATTERN + r"|(?![\d.]))")
_ACTION = re.compile(r"\s*([A-Za-z]+)")
_MESSAGE_ID = re.compile(r"<[^<>\s@]{1,400}@[^<>\s@]{1,400}>")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_NOT_IN_ADDRESS = re.compile(r"[\s<>\ufffd]")
_ADDRESS_TYPES = frozenset({"rfc822", "utf-8"})
_RETURNED = frozenset({"message/rfc822", "text/rfc822-headers", "message/global", "message/global-headers"})

def parse_dsn(raw: bytes, received_at: datetime) -> list[ProviderEvent] | None:
    """The events one bounce message reports; None when it is not a DSN, [] when nothing is usable.

    Raises ValueError only when ``received_at`` is naive.
    """
    if received_at.tzinfo is None or received_at.utcoffset() is None:
        raise ValueError("received_at must be timezone-aware")
    try:
        message = message_from_bytes(raw[:MAX_PARSED_BYTES])
        located = _locate(message)
    except Exception:  # noqa: BLE001 - the stdlib parser documents no exception set (deep nesting: RecursionError)
        return None
    if located is None:
        return None
    status_part, container = located
    blocks = status_part.get_payload() if status_part is not None else None
    if not isinstance(blocks, list):
        return []
    parsed = (_fields(block) for block in blocks[: 2 * MAX_GROUPS + 1] if isinstance(block, Message))
    groups = [fields for fields in parsed if fields]  # extra blank lines make empty blocks
    if not groups:
        return []
    per_message = groups[0]
    own = _fields(message)
    identity = f"id:{own['message-id']}" if own.get("message-id") else f"raw:{hashlib.sha256(raw).hexdigest()}"
    message_id = _returned_message_id(container)
    reported_at = _date(own.get("date")) or _date(per_message.get("arrival-date")) or received_at
    events: list[ProviderEvent] = []
    seen: set[str] = set()
    for group in groups:
        if len(events) >= MAX_GROUPS:
            break
        recipient = _address(group.get("final-recipient")) or _address(group.get("original-recipient"))
        action_match = _ACTION.match(group.get("action", ""))
        action = action_match[1].lower() if action_match else ""
        if recipient is None or action not in _KINDS:
            continue
        event_id = hashlib.sha256(f"{identity}\n{recipient}\n{action}".encode()).hexdigest()
        if event_id in seen:
            continue
        seen.add(event_id)
        kind = _KINDS[action]
        code = _effective_code(group.get("status", ""), group.get("diagnostic-code", ""))
        events.append(ProviderEvent(
            provider="smtp",
            provider_event_id=event_id,
            kind=kind,
            recipient=recipient,
            occurred_at=_date(group.get("last-attempt-date")) or reported_at,
            message_id=message_id,
            bounce_class=bounce_class(code) if kind is Kind.BOUNCED else None,
            detail={
                "status": group.get("status", ""),
                "action": action,
                "diagnostic_code": group.get("diagnostic-code", ""),
                "remote_mta": group.get("remote-mta", ""),
                "reporting_mta": per_message.get("reporting-mta", ""),
            },
        ))
    return events


def _locate(message: Message) -> tuple[Message | None, Message | None] | None:
    """(the message/delivery-status part, the container holding it), (None, report) for a delivery
    report without one, None when the message is neither; depth first, in document order."""
    report: Message | None = None
    stack: list[tuple[Message, Message | None, int]] = [(message, None, 0)]
    visited = 0
    while stack and visited < _MAX_PARTS:
        part, parent, depth = stack.pop()
        visited += 1
        content_type = part.get_content_type()
        if content_type == "message/delivery-status":
            return part, parent
        if not content_type.startswith("multipart/") or depth >= _MAX_DEPTH:
            continue
        report_type = str(part.get_param("report-type", "")).strip().lower()
        if content_type == "multipart/report" and report is None and report_type == "delivery-status":
            report = part
        payload = part.get_payload()
        if isinstance(payload, list):
            children = [child for child in payload[:_MAX_PARTS] if isinstance(child, Message)]
            stack.extend((child, part, depth + 1) for child in reversed(children))
    return (None, report) if report is not None else None


def _returned_message_id(container: Message | None) -> str | None:
    """The Message-ID of the first returned message (or its headers) beside the status part."""
    payload = container.get_payload() if container is not None else None
    if not isinstance(payload, list):
        return None
    for part in payload[:_MAX_PARTS]:
        if not isinstance(part, Message) or part.get_content_type() not in _RETURNED:
            continue
        inner = part.get_payload()
        headers: Message | None
        if isinstance(inner, list):
            headers = inner[0] if inner and isinstance(inner[0], Message) else None
        else:
            try:
                data = part.get_payload(decode=True)
                data = data[:_MAX_HEADER_BYTES] if isinstance(data, bytes) else b""
                headers = BytesHeaderParser().parsebytes(data)
            except Exception:  # noqa: BLE001 - as in parse_dsn: hostile bytes, no documented exception set
                headers = None
        found = _MESSAGE_ID.search(_fields(headers).get("message-id", "")) if headers is not None else None
        return found[0] if found else None
    return None


def _fields(block: Message) -> dict[str, str]:
    """Lower-cased field names to their first value, decoded, unfolded and cut."""
    fields: dict[str, str] = {}
    for name, value in block.raw_items():
        key = str(name).strip().lower()
        if key not in fields and isinstance(value, str):
            fields[key] = _text(value)
    return fields


def _text(value: str) -> str:
    """A stored header value (ASCII with surrogate-escaped bytes) as clean, printable UTF-8 text."""
    cut = value[: 4 * _MAX_FIELD_CHARS]
    try:
        decoded = cut.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeError:
        decoded = cut.encode("utf-8", "replace").decode("utf-8")
    return " ".join(_CONTROL.sub(" ", decoded).split())[:_MAX_FIELD_CHARS]


def _address(value: str | None) -> str | None:
    """``rfc822; local@Domain`` as ``local@domain``; None for another address type or a non-address."""
    if not value:
        return None
    address_type, semicolon, address = value.partition(";")
    if not semicolon:
        address = address_type
    elif address_type.strip().lower() not in _ADDRESS_TYPES:
        return None
    address = address.strip()
    if address.startswith("<") and address.endswith(">"):
        address = address[1:-1].strip()
    local, at, domain = address.rpartition("@")
    if not at or not local or not domain or len(address) > 320 or _NOT_IN_ADDRESS.search(address):
        return None
    return f"{local}@{domain.lower()}"


def _effective_code(status: str, diagnostic: str) -> Code | None:
    """Status as x.y.z, or the Diagnostic-Code's when Status is missing or the generic x.0.0."""
    found = _STATUS.match(status)
    code = (int(found[1]), int(found[2]), int(found[3])) if found else None
    if code is not None and code[1:] != (0, 0):
        return code
    diagnostic_type, semicolon, text = diagnostic.partition(";")
    reply = _REPLY.search(text) if semicolon and diagnostic_type.strip().lower() == "smtp" else None
    if reply is None:
        return code
    if reply[2] is not None and reply[2] == reply[1]:
        return int(reply[2]), int(reply[3]), int(reply[4])
    return int(reply[1]), 0, 0


def _date(value: str | None) -> datetime | None:
    """An RFC 5322 date as an aware datetime (``-0000``, no zone known, as UTC); None if unreadable."""
    if not value:
        return None
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
