"""The vocabulary shared by every part of the daemon.

* :class:`Delivery` – one claimed ``email_deliveries`` row, as the claimer
  hands it to the sender.
* :class:`ComposedMessage` – what composition makes of a row: envelope and
  the exact bytes to send.
* :class:`Outcome` – what a transport reports about one attempt.
* :class:`Transport` – the seam every transport implements.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol


class Status(enum.StrEnum):
    PENDING = "pending"
    SENDING = "sending"
    SENT = "sent"
    FAILED = "failed"
    CANCELLED = "cancelled"
    IN_DOUBT = "in_doubt"


FINAL_STATUSES = frozenset({Status.SENT, Status.FAILED, Status.CANCELLED})


class OutcomeKind(enum.StrEnum):
    """Outcome of one attempt, as recorded in ``email_delivery_attempts``."""

    SENT = "sent"  # the server/provider accepted the message
    TRANSIENT = "transient"  # not sent; may succeed later
    PERMANENT = "permanent"  # not sent; will never succeed as is
    AMBIGUOUS = "ambiguous"  # may or may not have been accepted


@dataclass(frozen=True, slots=True)
class Delivery:
    """A row claimed by this process (status ``sending``, our claim token)."""

    id: int
    dedupe_key: str
    claim_token: uuid.UUID
    attempts: int  # including the attempt being made now
    max_attempts: int | None
    from_address: str | None
    to_addresses: tuple[str, ...]
    cc_addresses: tuple[str, ...]
    bcc_addresses: tuple[str, ...]
    reply_to: str | None
    subject: str
    text_body: str | None
    html_body: str | None
    headers: dict[str, Any]
    attachments: list[Any]
    metadata: dict[str, Any]
    transport: str | None
    priority: int
    scheduled_at: datetime
    expires_at: datetime | None
    created_at: datetime
    first_attempt_at: datetime | None = None  # start of the provider's idempotency window
    # envelope recipients this attempt sends to, when an earlier attempt reached the others (None: all)
    retry_recipients: tuple[str, ...] | None = None
    # why the row cannot be sent as read (a value no decoder handles, content over the size
    # limit, left unread); the daemon fails such a row alone, without a network call
    defect: str | None = None


@dataclass(frozen=True, slots=True)
class AttachmentFields:
    filename: str
    content_type: str  # type/subtype
    content: bytes


@dataclass(frozen=True, slots=True)
class MessageFields:
    """A row's validated content, for transports that take fields rather than MIME (provider APIs).

    Addresses are ``Name <local@ascii-domain>`` or bare ``local@ascii-domain``.
    """

    from_address: str
    to: tuple[str, ...]
    cc: tuple[str, ...]
    bcc: tuple[str, ...]
    reply_to: str | None
    subject: str
    text: str | None
    html: str | None
    headers: tuple[tuple[str, str], ...]  # custom headers, already checked
    attachments: tuple[AttachmentFields, ...]


@dataclass(frozen=True, slots=True)
class ComposedMessage:
    """A message ready for the wire."""

    sender: str  # envelope MAIL FROM, ASCII (IDN domains in punycode)
    recipients: tuple[str, ...]  # envelope RCPT TO: to + cc + bcc, deduplicated
    message_id: str  # with angle brackets
    data: bytes  # RFC 5322 message, CRLF line endings, no Bcc header
    fields: MessageFields | None = None  # the same content as fields (set by compose())


@dataclass(frozen=True, slots=True)
class RefusedRecipient:
    """A recipient the message did not reach in this attempt (the others did).

    ``reply_code`` 5xx: refused for good. 4xx, or ``None`` (the transaction
    carrying it broke before the body went out): not delivered, may be retried.
    ``unknown``: the transaction carrying it lost its connection after the body
    went out, so the server may have accepted it for this recipient.
    """

    address: str
    reply_code: int | None
    message: str
    unknown: bool = False

    @property
    def permanent(self) -> bool:
        return not self.unknown and self.reply_code is not None and 500 <= self.reply_code < 600


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one attempt. Transports return it; they never raise it."""

    kind: OutcomeKind
    error: str | None = None  # human readable, no secrets
    reply_code: int | None = None
    enhanced_code: str | None = None  # RFC 3463, e.g. "5.1.1"
    provider_message_id: str | None = None
    retry_after_seconds: float | None = None
    refused: tuple[RefusedRecipient, ...] = field(default=())
    # False when the attempt never reached a server that could judge the
    # message (an outage, a paused transport, a row that cannot be composed):
    # the attempt is recorded but not counted against max_attempts.
    charge_attempt: bool = True
    # The transport asks to be paused this long (quota exhausted, credentials
    # refused): nothing is claimed for it meanwhile; the attempt is not charged.
    pause_seconds: float | None = None
    # For an ambiguous outcome: until when a resend is absorbed by the
    # provider's idempotency key, so it is safe whatever the in_doubt policy.
    resend_safe_until: datetime | None = None
    # The daemon itself held the send back (transport paused, claim too old to
    # start safely): nothing was attempted, so it says nothing about the server.
    held_back: bool = False

    @classmethod
    def sent(cls, provider_message_id: str | None = None, **kw: Any) -> Outcome:
        return cls(OutcomeKind.SENT, provider_message_id=provider_message_id, **kw)

    @classmethod
    def transient(cls, error: str, **kw: Any) -> Outcome:
        return cls(OutcomeKind.TRANSIENT, error=error, **kw)

    @classmethod
    def permanent(cls, error: str, **kw: Any) -> Outcome:
        return cls(OutcomeKind.PERMANENT, error=error, **kw)

    @classmethod
    def ambiguous(cls, error: str, **kw: Any) -> Outcome:
        return cls(OutcomeKind.AMBIGUOUS, error=error, **kw)


def idempotency_key(delivery: Delivery, message: ComposedMessage) -> str:
    """The key providers de-duplicate by: the dedupe key when it is safe in an HTTP/SMTP
    header (printable ASCII, at most 255 characters), else a digest stable across retries."""
    key = delivery.dedupe_key
    if key.isascii() and key.isprintable() and len(key) <= 255 and key.strip() == key:
        return key
    return "outbox-" + message.message_id.strip("<>").split("@", 1)[0]


class Transport(Protocol):
    """One way of handing a message to the outside world."""

    name: str
    max_parallel: int  # sends in flight at once; the daemon never asks for more
    send_timeout_seconds: float  # hard cap on one send
    idempotency_window_seconds: float | None  # how long the far side de-duplicates by idempotency key

    async def send(self, message: ComposedMessage, delivery: Delivery) -> Outcome:
        """Try once. Never raises for a delivery problem: report it as an Outcome."""

    async def check(self) -> str:
        """Reach the server without sending; return a one-line description.

        Raises :class:`outbox_mailer.errors.TransportUnavailable`.
        """

    async def aclose(self) -> None:
        """Close pooled connections."""
