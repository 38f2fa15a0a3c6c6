"""The values every provider's webhook module and the DSN parser produce, and their refusals.

Refusals (each maps to the HTTP status the receiver answers, nothing written)::

    WebhookRefused            status
     ├── Unauthenticated      401: signature, credentials or timestamp wrong or missing
     ├── Malformed            400: authentic, but not a body of the provider's documented shape
     ├── TooLarge             413: a body over MAX_BODY_BYTES (checked before verification), or one whose
     │                             signature is inside it over MAX_UNVERIFIED_BYTES
     └── Unavailable          503: what the check needs cannot be had now (SNS's certificate): retry later

Each provider's module declares its webhook scheme as a :class:`WebhookScheme`: its credentials
(the settings ``OUTBOX_MAILER_WEBHOOKS__<NAME>__*``, checked when they are read) and how a request is
verified and parsed with them; ``webhooks.py`` lists them.

An authentic body whose event types are unknown is not refused: its module returns no event for
them (the receiver answers 200, so the provider stops retrying). Nor is one whose strings hold what
PostgreSQL cannot store (U+0000, a lone UTF-16 surrogate, both valid JSON escapes): :func:`storable`
drops the one and replaces the other, and the rest is recorded.
"""

from __future__ import annotations

import json
import re
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel

from ..errors import OutboxMailerError

_T = TypeVar("_T")

MAX_BODY_BYTES = 5 * 1024 * 1024
# The window of a signed timestamp (Resend's Svix, SendGrid, Mailgun). Svix and Stripe use 5 minutes; SendGrid
# and Mailgun name none. A genuine POST is signed when it is sent, so it is seconds old on arrival: the window
# only has to absorb clock skew and a slow network, and a wider one leaves a captured request replayable for
# longer. A replay inside it repeats the provider's event ids, which the receiver records once.
TOLERANCE_SECONDS = 300
# Mailgun and SNS put the signature inside the JSON body, so it is parsed before it is verified. Parsing costs
# far more than the bytes (a list of empty lists: ~25 bytes per byte), so such a body is parsed only when
# small: SNS messages are at most 256 KiB (under 1 MiB once escaped into the envelope), Mailgun's events a
# few KiB; and of few values (an SNS envelope has about a dozen, a Mailgun event a few hundred).
MAX_UNVERIFIED_BYTES = 1024 * 1024
MAX_UNVERIFIED_VALUES = 10_000
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_SURROGATE = re.compile("[\ud800-\udfff]")  # in a str from JSON, always a lone one (a pair decodes to one character)


class Kind(StrEnum):
    """email_delivery_events.kind."""

    DELIVERED = "delivered"
    DELAYED = "delayed"
    BOUNCED = "bounced"
    COMPLAINED = "complained"
    REJECTED = "rejected"  # the provider refused to send it (for example its own suppression list)
    UNSUBSCRIBED = "unsubscribed"


class BounceClass(StrEnum):
    """email_delivery_events.bounce_class, for kind BOUNCED (None for the other kinds)."""

    HARD = "hard"  # permanent: the address does not exist or never accepts mail; suppresses
    SOFT = "soft"  # temporary: mailbox full, greylisting, a transient failure; never suppresses
    UNDETERMINED = "undetermined"


@dataclass(frozen=True, slots=True)
class ProviderEvent:
    """One event about one recipient of one email, as the provider or a bounce reported it.

    Matching to a row (by the receiver, in this order): ``provider_message_id`` (the provider's id
    of the sent email, as our transport recorded it from the send's answer, or the relay's queue id
    from the SMTP 250 reply), else ``message_id`` (our Message-ID header, angle brackets included:
    ``<hex@domain>``), else ``dedupe_key`` (the tag, metadata or custom argument our transport added
    on send, where the provider echoes it).
    """

    provider: str  # "resend", "postmark", "sendgrid", "ses", "mailgun", "smtp" (a DSN)
    provider_event_id: str  # unique per provider: the provider's own event id, or a stable digest
    kind: Kind
    recipient: str | None
    occurred_at: datetime | None  # timezone-aware, when the provider says it happened
    provider_message_id: str | None = None
    message_id: str | None = None
    dedupe_key: str | None = None
    bounce_class: BounceClass | None = None
    detail: dict[str, Any] = field(default_factory=dict)  # the provider's own fields, JSON-serialisable


def storable(event: ProviderEvent) -> ProviderEvent:
    """``event`` with every string PostgreSQL can store (text and jsonb refuse U+0000 and lone
    surrogates): U+0000 dropped, a lone surrogate replaced by U+FFFD, in its fields and its detail."""
    return replace(event, **{name: _clean(getattr(event, name)) for name in (
        "provider_event_id", "recipient", "provider_message_id", "message_id", "dedupe_key", "detail")})


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value.replace("\x00", "")) if not value.isascii() or "\x00" in value \
            else value
    if isinstance(value, dict):
        return {_clean(key): _clean(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(item) for item in value]
    return value


@dataclass(frozen=True, slots=True)
class Received:
    """What an authentic webhook body holds."""

    events: tuple[ProviderEvent, ...]
    replay_token: str | None = None  # Mailgun: a token the receiver must refuse to see again for another body
    confirm_url: str | None = None  # SES/SNS: a SubscriptionConfirmation's SubscribeURL, to GET


@dataclass(frozen=True, slots=True)
class WebhookRequest:
    """A webhook request as every scheme reads it."""

    headers: Mapping[str, str]  # names in lower case
    body: bytes  # raw, as signed
    now: datetime  # timezone-aware: signed timestamps are checked against it
    certificate: Callable[[str], Awaitable[bytes]]  # a signing certificate by URL (SNS's), fetched by the receiver


class WebhookScheme(BaseModel):
    """One provider's webhook: its credentials (the fields: ``OUTBOX_MAILER_WEBHOOKS__<NAME>__<FIELD>``),
    whether they turn its route ``POST /webhooks/<name>`` on, and a request verified with them, then parsed."""

    name: ClassVar[str]  # the provider: the route's last segment, the settings' <NAME>, ProviderEvent.provider

    @abstractmethod
    def enabled(self) -> bool:
        """The credentials are set: the route is on."""

    @abstractmethod
    async def received(self, request: WebhookRequest) -> Received:
        """The events of an authentic request; WebhookRefused when it is not one (or not configured)."""

    def required(self, credential: _T | None) -> _T:
        """A credential the check needs; Unauthenticated when it is not set."""
        if credential is None:
            raise Unauthenticated(f"the {self.name} webhook has no credentials set")
        return credential


class WebhookRefused(OutboxMailerError):
    status = 400

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Unauthenticated(WebhookRefused):
    status = 401


class Malformed(WebhookRefused):
    status = 400


class TooLarge(WebhookRefused):
    status = 413


class Unavailable(WebhookRefused):
    status = 503


def check_timestamp(value: str, now: datetime, name: str) -> None:
    """Unauthenticated unless ``value`` is a Unix time in whole seconds within TOLERANCE_SECONDS of ``now``.

    The reason names neither ``now`` nor the difference: a refusal tells a caller nothing of the server's clock.
    """
    if not (value.isascii() and value.isdigit() and len(value) <= 15):  # 15 digits: beyond the year 30,000,000
        raise Unauthenticated(f"{name} is not a Unix time")
    if abs(now.timestamp() - int(value)) > TOLERANCE_SECONDS:
        raise Unauthenticated(f"{name} is more than {TOLERANCE_SECONDS} s from now")


def unverified_json(body: bytes, what: str) -> Any:
    """The JSON of a body whose signature is inside it, parsed only when MAX_UNVERIFIED_BYTES and
    MAX_UNVERIFIED_VALUES bound what that costs: TooLarge over the one, Unauthenticated over the other
    or when it is not JSON (``what`` names the message it should have been)."""
    if len(body) > MAX_UNVERIFIED_BYTES:
        raise TooLarge(f"a body over {MAX_UNVERIFIED_BYTES} bytes is not {what}")
    skeleton = _JSON_STRING.sub(b"", body)  # every value but the first follows a comma or opens a container
    if skeleton.count(b",") + skeleton.count(b"[") + skeleton.count(b"{") > MAX_UNVERIFIED_VALUES:
        raise Unauthenticated(f"body is not {what} (more than {MAX_UNVERIFIED_VALUES} JSON values)")
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        raise Unauthenticated(f"body is not {what} (not JSON)") from None


def json_body(body: bytes) -> Any:
    """The JSON of an authentic body; Malformed when it is not JSON (nested past the parser's depth too)."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise Malformed("the body is not JSON") from None


def json_object(body: bytes) -> dict[str, Any]:
    document = json_body(body)
    if not isinstance(document, dict):
        raise Malformed("the body is not a JSON object")
    return document


def iso_time(value: Any) -> datetime | None:
    """An ISO 8601 time, timezone-aware (UTC when it names no offset); None when absent or unreadable."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
