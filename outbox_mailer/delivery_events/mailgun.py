"""Mailgun webhooks (JSON, one event per request): the signature, then the event. Pure: no I/O.

Scheme (Mailgun, "Securing Webhooks",
https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/securing-webhooks): the body carries
``signature: {timestamp, token, signature}`` beside ``event-data``; ``signature`` is the hex HMAC-SHA256,
keyed with the account's HTTP webhook signing key, of ``timestamp`` and ``token`` concatenated with no
separator. For a domain of a subaccount Mailgun adds ``parent-signature``, the same HMAC under the primary
account's key: either one matching the configured key authenticates. Mailgun suggests checking that the
timestamp is not far from now but names no window; 5 minutes is the one the other signed-webhook schemes
use (see ``model.TOLERANCE_SECONDS``). The token is random per request and Mailgun suggests not honouring a token
seen before, so :func:`parse` hands it to the receiver as ``replay_token``.

Events ("Event Types", https://documentation.mailgun.com/docs/mailgun/user-manual/events/event-types, and
"Event Structure"):

=====================================  ===========================================================
``event-data``                         kind
=====================================  ===========================================================
delivered                              delivered
failed, severity temporary             delayed: "temporarily rejected by an ESP"; Mailgun retries,
                                       so this is a deferral, not a bounce (the final word comes
                                       later as delivered or a permanent failure)
failed, permanent, reason bounce       bounced, hard (also when no reason is given)
  (or no reason)
failed, permanent, reason old          bounced, soft: Mailgun gave up after retrying temporary
                                       failures, which says nothing against the address
failed, permanent, reason suppress-*   rejected: Mailgun dropped it unsent, the address being on
                                       its bounce, complaint or unsubscribe list
failed, permanent, other reason        bounced, undetermined (``espblock``, ``generic``, ...)
rejected                               rejected (Mailgun refused the send request)
complained                             complained
unsubscribed                           unsubscribed
accepted, opened, clicked, others      no event
=====================================  ===========================================================

``provider_event_id`` is ``event-data.id`` (Mailgun: "unique within a day"). ``provider_message_id`` and
``message_id`` are ``event-data.message.headers.message-id`` put in angle brackets: Mailgun gives that
header without them, while its send API answers the id with them (``<...@domain>``). Mailgun keeps a
Message-ID its client set, so for mail we relayed through Mailgun's SMTP (whose 250 reply to DATA is
"Great success", with no id) it is our Message-ID, and the receiver matches on that. ``dedupe_key`` is
``event-data.user-variables.dedupe_key`` when the sender set it.
"""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime
from typing import Any, ClassVar

from pydantic import SecretStr, field_validator

from .model import (
    BounceClass,
    Kind,
    Malformed,
    ProviderEvent,
    Received,
    Unauthenticated,
    WebhookRequest,
    WebhookScheme,
    check_timestamp,
    json_object,
    unverified_json,
)

PROVIDER = "mailgun"

KINDS: dict[str, Kind] = {
    "delivered": Kind.DELIVERED,
    "rejected": Kind.REJECTED,
    "complained": Kind.COMPLAINED,
    "unsubscribed": Kind.UNSUBSCRIBED,
}
SUPPRESSION_REASONS = frozenset({"suppress-bounce", "suppress-complaint", "suppress-unsubscribe"})


def signature_for(signing_key: str, timestamp: str, token: str) -> str:
    """The hex HMAC-SHA256 Mailgun sends for this timestamp and token."""
    return hmac.new(signing_key.encode("utf-8"), (timestamp + token).encode("utf-8"), hashlib.sha256).hexdigest()


def verify(body: bytes, signing_key: str, now: datetime) -> None:
    """Raise Unauthenticated unless Mailgun signed this body's token less than 5 minutes from ``now``.

    Raises ValueError for an empty ``signing_key`` (a configuration error, not a refusal).
    """
    if not signing_key:
        raise ValueError("the Mailgun webhook signing key is empty")
    document = unverified_json(body, "a signed Mailgun event")
    block = document.get("signature") if isinstance(document, dict) else None
    if not isinstance(block, dict):
        raise Unauthenticated("body has no signature object")
    timestamp, token = block.get("timestamp"), block.get("token")
    if isinstance(timestamp, int) and not isinstance(timestamp, bool):
        timestamp = str(timestamp)
    if not isinstance(timestamp, str):
        raise Unauthenticated("signature.timestamp is not a Unix time")
    if not isinstance(token, str) or not token:
        raise Unauthenticated("signature.token is missing")
    check_timestamp(timestamp, now, "signature.timestamp")
    expected = signature_for(signing_key, timestamp, token)
    offered = [block.get(name) for name in ("signature", "parent-signature")]
    matched = False
    for candidate in offered:
        if isinstance(candidate, str) and candidate.isascii():
            matched |= hmac.compare_digest(expected, candidate.lower())
    if not matched:
        raise Unauthenticated("signature does not match the timestamp and token")


def parse(body: bytes) -> Received:
    """The event of an authentic body (verify it first), with its token as ``replay_token``."""
    document = json_object(body)
    block = document.get("signature")
    token = block.get("token") if isinstance(block, dict) else None
    if not isinstance(token, str) or not token:
        raise Malformed("body has no signature.token")
    data = document.get("event-data")
    if not isinstance(data, dict):
        raise Malformed("body has no event-data object")
    name = data.get("event")
    if not isinstance(name, str):
        raise Malformed("event-data has no event name")
    classified = _classify(name, data)
    if classified is None:
        return Received((), replay_token=token)
    kind, bounce_class = classified
    event_id, timestamp = data.get("id"), data.get("timestamp")
    if not isinstance(event_id, str) or not event_id:
        raise Malformed(f"{name} event without an id")
    recipient = data.get("recipient")
    if recipient is not None and not isinstance(recipient, str):
        raise Malformed(f"{name} event with a recipient that is not a string")
    message_id = _message_id(data)
    user_variables = data.get("user-variables")
    dedupe_key = user_variables.get("dedupe_key") if isinstance(user_variables, dict) else None
    event = ProviderEvent(
        provider=PROVIDER,
        provider_event_id=event_id,
        kind=kind,
        recipient=recipient or None,
        occurred_at=_time(timestamp, name),
        provider_message_id=message_id,
        message_id=message_id,
        dedupe_key=dedupe_key if isinstance(dedupe_key, str) and dedupe_key else None,
        bounce_class=bounce_class,
        detail=data,
    )
    return Received((event,), replay_token=token)


def _classify(name: str, data: dict[str, Any]) -> tuple[Kind, BounceClass | None] | None:
    if name != "failed":
        kind = KINDS.get(name)
        return None if kind is None else (kind, None)
    severity, reason = data.get("severity"), data.get("reason")
    if severity == "temporary":
        return Kind.DELAYED, None
    if severity != "permanent":
        raise Malformed("failed event whose severity is neither permanent nor temporary")
    if reason in SUPPRESSION_REASONS:
        return Kind.REJECTED, None
    if reason is None or reason == "bounce":
        return Kind.BOUNCED, BounceClass.HARD
    if reason == "old":
        return Kind.BOUNCED, BounceClass.SOFT
    return Kind.BOUNCED, BounceClass.UNDETERMINED


def _message_id(data: dict[str, Any]) -> str | None:
    message = data.get("message")
    headers = message.get("headers") if isinstance(message, dict) else None
    value = headers.get("message-id") if isinstance(headers, dict) else None
    if not isinstance(value, str) or not value.strip("<> \t"):
        return None
    return f"<{value.strip().strip('<>')}>"


def _time(value: Any, name: str) -> datetime | None:
    if value is None:
        return None
    try:
        seconds = float(value) if isinstance(value, str) else value
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise TypeError
        return datetime.fromtimestamp(seconds, UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        raise Malformed(f"{name} event with a timestamp that is not a Unix time") from None


# ---- the webhook scheme (webhooks.py lists it) -----------------------------------------------------


class MailgunWebhook(WebhookScheme):
    """``OUTBOX_MAILER_WEBHOOKS__MAILGUN__SIGNING_KEY``: the HTTP webhook signing key of the Mailgun account."""

    name: ClassVar[str] = PROVIDER
    signing_key: SecretStr | None = None

    @field_validator("signing_key")
    @classmethod
    def _key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().strip():
            raise ValueError("empty: set the signing key Mailgun shows, or leave the setting out")
        return value

    def enabled(self) -> bool:
        return self.signing_key is not None

    async def received(self, request: WebhookRequest) -> Received:
        verify(request.body, self.required(self.signing_key).get_secret_value(), request.now)
        return parse(request.body)
