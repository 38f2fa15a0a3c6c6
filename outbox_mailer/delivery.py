"""The vocabulary shared by every part of the daemon.

* :class:`Delivery` – one claimed ``email_deliveries`` row, as the claimer
  hands it to the sender.
* :class:`ComposedMessage` – what composition makes of a row: envelope and
  the exact bytes to send.
* :class:`Outcome` – what a transport reports about one attempt, with its :class:`Cause`.
* :class:`Transport` – the seam every transport implements; :class:`BatchTransport` –
  one that also sends many messages per request, each member getting a
  :data:`BatchOutcome` (an :class:`Outcome`, or :class:`SendSingly`); :func:`batch_transport`
  tells one apart.

:func:`quick_init` gives the frozen values made for every email a faster ``__init__``.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

V = TypeVar("V", bound="DataclassInstance")


def quick_init(cls: type[V]) -> type[V]:
    """Give a frozen dataclass with slots an ``__init__`` that sets each slot through its descriptor: the
    dataclass's own calls ``object.__setattr__`` for each field (about 150 ns), and the values each email's
    path makes (its row, message, outcome, transition, attempt...) have some 100 fields. Same parameters,
    defaults and ``__post_init__``, in about 60% of the time; the instance stays frozen."""
    fields, own, missing = dataclasses.fields(cls), vars(cls), dataclasses.MISSING
    if not own["__dataclass_params__"].frozen or len(fields) != len(cls.__dataclass_fields__):
        raise TypeError(f"{cls.__name__}: a frozen dataclass without ClassVar or InitVar fields")
    params, lines, cells = [], [], {}
    for i, f in enumerate(fields):
        slot = getattr(cls, f.name, None)
        if not isinstance(slot, types.MemberDescriptorType) or f.kw_only or f.default_factory is not missing:
            raise TypeError(f"{cls.__name__}.{f.name}: a slot, neither keyword-only nor with a default factory")
        cells[f"_s{i}"], default = slot.__set__, f"_d{i}"
        if f.default is not missing:
            cells[default] = f.default
        if f.init:
            params.append(f.name if f.default is missing else f"{f.name}={default}")
            lines.append(f"_s{i}(self, {f.name})")
        elif f.default is not missing:
            lines.append(f"_s{i}(self, {default})")
    lines += ["self.__post_init__()"] if hasattr(cls, "__post_init__") else []
    namespace: dict[str, Any] = {"__name__": cls.__module__}  # the source: made of the field names, as the dataclass's
    body = "\n  ".join(lines or ["pass"])
    exec(f"def make({', '.join(cells)}):\n def __init__(self, {', '.join(params)}):\n  {body}\n return __init__",
         namespace)
    init = namespace["make"](**cells)
    init.__qualname__, init.__annotations__ = f"{cls.__qualname__}.__init__", dict(own["__init__"].__annotations__)
    type.__setattr__(cls, "__init__", init)
    return cls


class Status(enum.StrEnum):
    PENDING = "pending"
    SENDING = "sending"
    SENT = "sent"
    FAILED = "failed"
    CANCELLED = "cancelled"
    IN_DOUBT = "in_doubt"




class OutcomeKind(enum.StrEnum):
    """Outcome of one attempt, as recorded in ``email_delivery_attempts``."""

    SENT = "sent"  # the server/provider accepted the message
    TRANSIENT = "transient"  # not sent; may succeed later
    PERMANENT = "permanent"  # not sent; will never succeed as is
    AMBIGUOUS = "ambiguous"  # may or may not have been accepted


@dataclass(frozen=True, slots=True)
class TemplateRef:
    """A row's stored template: the version its INSERT resolved, and the data it renders with (docs/templates.md)."""

    name: str
    locale: str
    version: int
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ProviderTemplate:
    """A template kept at the provider, which renders it (docs/templates.md, "Provider templates"): its alias or id
    as the row names it, and the model it renders with."""

    name: str
    model: dict[str, Any]


@quick_init
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
    # recipients suppressed when it was claimed, as 'address reason YYYY-MM-DD' (suppression.py)
    suppressed: tuple[str, ...] = ()
    message_id: str | None = None  # written by the first claim (message_ids.py); None: never claimed
    # the transport of the last attempt when its outcome was unknown: a resend goes there (failover.py)
    pinned_transport: str | None = None
    # why the row cannot be sent as read (a value no decoder handles, content over the size
    # limit, left unread); the daemon fails such a row alone, without a network call
    defect: str | None = None
    # the row's to, cc and bcc addresses as stored (screening may leave some out of the fields above):
    # a recipient's bounce tag names its position here (bounce_tags.py); () when not read from a row
    listed: tuple[str, ...] = ()
    # the W3C traceparent the application enqueued it under (docs/tracing.md); None: not traced. As stored:
    # a value written past the INSERT's check is ignored by the tracing, never a reason to fail the row
    traceparent: str | None = None
    # the stored template it names, rendered before composition into subject, text_body and html_body (which
    # are empty until then); None: the row's own content
    template: TemplateRef | None = None
    # the category a one-click unsubscribe leaves (docs/unsubscribe.md); None: no List-Unsubscribe
    unsubscribe_category: str | None = None
    # the provider's own template it names, sent in that provider's fields (subject and bodies stay empty); only a
    # transport whose kind renders provider templates may carry it (providers/registry.py)
    provider_template: ProviderTemplate | None = None
    # the size of its content as claimed (bytes; 0: not loaded), counted in what the daemon holds (inflight.py)
    content_bytes: int = 0


@dataclass(frozen=True, slots=True)
class AttachmentFields:
    filename: str
    content_type: str  # type/subtype
    content: bytes
    content_id: str | None = None  # an inline part's Content-ID, without angle brackets; None: a file


@quick_init
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


@quick_init
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


class Cause(enum.StrEnum):
    """Why an attempt ended as it did. Each cause has one constructor on :class:`Outcome`;
    what is recorded, whether the attempt counts and what the gate learns all follow from it."""

    SENT = "sent"  # the server/provider accepted the message
    TRANSIENT = "transient"  # refused for now (4xx, 429), or broke before the message went out: retry
    PERMANENT = "permanent"  # refused for good (5xx, an invalid request)
    AMBIGUOUS = "ambiguous"  # may or may not have been accepted (no reply after the body)
    UNREACHABLE = "unreachable"  # no server could judge the message (refused connection, TLS, AUTH ...)
    PAUSED = "paused"  # the far side refuses our account for a while (quota, credentials, relaying)
    HELD_BACK = "held_back"  # the daemon did not try (transport paused, shutdown)
    UNSTARTED = "unstarted"  # the claim went back untried (too old to start: it waited for capacity); nothing recorded
    UNSENDABLE = "unsendable"  # the row cannot be sent as it is (cannot compose, expired, unreadable)
    SUPPRESSED = "suppressed"  # every recipient is suppressed: the row fails unsent


_RECORDED_AS = {
    Cause.SENT: OutcomeKind.SENT, Cause.TRANSIENT: OutcomeKind.TRANSIENT, Cause.PERMANENT: OutcomeKind.PERMANENT,
    Cause.AMBIGUOUS: OutcomeKind.AMBIGUOUS, Cause.UNREACHABLE: OutcomeKind.TRANSIENT,
    Cause.PAUSED: OutcomeKind.TRANSIENT, Cause.HELD_BACK: OutcomeKind.TRANSIENT,
    Cause.UNSENDABLE: OutcomeKind.PERMANENT, Cause.SUPPRESSED: OutcomeKind.PERMANENT,
    Cause.UNSTARTED: OutcomeKind.TRANSIENT,  # (never written)
}
# The attempt counts against max_attempts only when a server judged the message.
_CHARGED = frozenset({Cause.SENT, Cause.TRANSIENT, Cause.PERMANENT, Cause.AMBIGUOUS})


@quick_init
@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one attempt. Transports return it; they never raise it.

    Build it with the constructor of its cause (``Outcome.unreachable(...)``);
    ``kind`` (what the attempt row records) and ``charge_attempt`` follow from
    the cause and are never set on their own.
    """

    cause: Cause
    error: str | None = None  # human readable, no secrets
    reply_code: int | None = None
    enhanced_code: str | None = None  # RFC 3463, e.g. "5.1.1"
    provider_message_id: str | None = None
    reply: str | None = None  # the server's whole final reply, one line (SMTP: the answer to DATA)
    retry_after_seconds: float | None = None
    refused: tuple[RefusedRecipient, ...] = field(default=())
    pause_seconds: float | None = None  # PAUSED: how long nothing is claimed for the transport
    # AMBIGUOUS: until when a resend is absorbed by the provider's idempotency key,
    # so it is safe whatever the in_doubt policy.
    resend_safe_until: datetime | None = None

    @property
    def kind(self) -> OutcomeKind:
        return _RECORDED_AS[self.cause]

    @property
    def charge_attempt(self) -> bool:
        return self.cause in _CHARGED

    @classmethod
    def sent(cls, provider_message_id: str | None = None, **kw: Any) -> Outcome:
        return cls(Cause.SENT, provider_message_id=provider_message_id, **kw)

    @classmethod
    def transient(cls, error: str, **kw: Any) -> Outcome:
        return cls(Cause.TRANSIENT, error=error, **kw)

    @classmethod
    def permanent(cls, error: str, **kw: Any) -> Outcome:
        return cls(Cause.PERMANENT, error=error, **kw)

    @classmethod
    def ambiguous(cls, error: str, **kw: Any) -> Outcome:
        return cls(Cause.AMBIGUOUS, error=error, **kw)

    @classmethod
    def unreachable(cls, error: str, **kw: Any) -> Outcome:
        return cls(Cause.UNREACHABLE, error=error, **kw)

    @classmethod
    def paused(cls, error: str, pause_seconds: float, **kw: Any) -> Outcome:
        return cls(Cause.PAUSED, error=error, pause_seconds=pause_seconds, **kw)

    @classmethod
    def held_back(cls, error: str, **kw: Any) -> Outcome:
        return cls(Cause.HELD_BACK, error=error, **kw)

    @classmethod
    def unsendable(cls, error: str, **kw: Any) -> Outcome:
        return cls(Cause.UNSENDABLE, error=error, **kw)

    @classmethod
    def suppressed(cls, error: str) -> Outcome:
        return cls(Cause.SUPPRESSED, error=error)

    @classmethod
    def unstarted(cls, error: str) -> Outcome:
        return cls(Cause.UNSTARTED, error=error)


@dataclass(frozen=True, slots=True)
class SendSingly:
    """A batch member the provider did not judge: send it again on its own.

    A provider refused a batch request as a whole (a 4xx that names no member, or a
    request that could not be built), so nothing in it was sent and nothing was said
    about this member. It is not an attempt's outcome: the caller sends the member
    again singly, under its own idempotency key, and records what that send returns.
    :meth:`held_back` is the outcome to record instead when it cannot do so now.
    """

    reason: str  # why the batch was refused, human readable, no secrets
    reply_code: int | None = None  # the batch request's HTTP status, if it got one

    def held_back(self) -> Outcome:
        """The outcome to record when the member is not sent singly at once (retried, not charged)."""
        return Outcome.held_back(f"{self.reason}; to be sent singly", reply_code=self.reply_code)


# What a batch request says about one member, in request order: an attempt's outcome, or send it singly.
BatchOutcome = Outcome | SendSingly


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


@runtime_checkable
class BatchTransport(Transport, Protocol):
    """A transport that can also send many messages in one request (a provider batch endpoint).

    ``batch_limit`` is 0 when batching is off or the far side has no batch endpoint.
    Members go in one request under one idempotency key (``key``, recorded by the
    caller before the request: :func:`outbox_mailer.providers.seam.batch_idempotency_key`).
    """

    batch_limit: int  # most members in one request; 0: never batch

    def batchable(self, message: ComposedMessage, delivery: Delivery) -> bool:
        """Whether this message may go in a batch (else it goes singly: attachments, size ...)."""

    async def send_batch(self, messages: Sequence[ComposedMessage], deliveries: Sequence[Delivery],
                         key: str) -> list[BatchOutcome]:
        """Try once, in one request: exactly one result per member, in order. Never raises for a
        delivery problem; raises ValueError when the members break the contract above."""

    def batch_digest(self, messages: Sequence[ComposedMessage], deliveries: Sequence[Delivery],
                     key: str) -> str | None:
        """A digest of the exact request :meth:`send_batch` makes for the same arguments (recorded
        before it, so that a resend can prove it is the identical request); None when it cannot be
        built."""


def batch_transport(transport: Transport) -> BatchTransport | None:
    """``transport`` as a :class:`BatchTransport` when it sends batches (``batch_limit`` over 1), else None."""
    return transport if isinstance(transport, BatchTransport) and transport.batch_limit > 1 else None
