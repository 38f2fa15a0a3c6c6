"""SendGrid's Event Webhook: the Signed Event Webhook check, then the events. Pure: no I/O.

Scheme (Twilio SendGrid, "Getting Started with the Event Webhook Security Features",
https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/getting-started-event-webhook-security-features,
and SendGrid's own helper ``EventWebhook.verify_signature`` in sendgrid-python, which verifies
``timestamp + payload``): ECDSA on P-256 with SHA-256 over the ``X-Twilio-Email-Event-Webhook-Timestamp``
header's value followed by the raw body, byte for byte. ``X-Twilio-Email-Event-Webhook-Signature`` is the
base64 of the DER signature. The verification key is shown in SendGrid's settings as base64 DER
SubjectPublicKeyInfo (a PEM ``PUBLIC KEY`` block is accepted too).

Body (Event Webhook Reference, https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/event):
a JSON array of event objects, custom arguments merged in at the top level of each.

===================================  ================================================================
``event``                            kind
===================================  ================================================================
delivered                            delivered
deferred                             delayed (the receiving server refused for now; SendGrid retries)
bounce, ``type`` bounce              bounced, hard ("could not or would not accept mail to this
                                     recipient permanently")
bounce, ``type`` blocked             bounced, soft (a block: the message refused, not the address;
                                     SendGrid does not suppress blocked addresses by default)
bounce, other or no ``type``         bounced, undetermined
dropped                              rejected (SendGrid never sent it: its suppression lists, invalid)
spamreport                           complained
unsubscribe, group_unsubscribe       unsubscribed
processed, open, click, others       no event
===================================  ================================================================

``provider_event_id`` is ``sg_event_id``. ``provider_message_id`` is ``sg_message_id`` up to its first
``.``: SendGrid appends filter data there, and the send's ``X-Message-Id`` answer (what our transport
records) is that prefix. ``dedupe_key`` is the custom argument our transport adds on every send
(``custom_args: {"dedupe_key": ...}``, see :mod:`outbox_mailer.providers.sendgrid`). ``message_id``
is ``smtp-id`` when it has the ``<...>`` form (our Message-ID when the mail went through SendGrid's
SMTP relay).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from datetime import UTC, datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import field_validator

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
    json_body,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import ec

PROVIDER = "sendgrid"
SIGNATURE_HEADER = "x-twilio-email-event-webhook-signature"
TIMESTAMP_HEADER = "x-twilio-email-event-webhook-timestamp"

KINDS: dict[str, Kind] = {
    "delivered": Kind.DELIVERED,
    "deferred": Kind.DELAYED,
    "bounce": Kind.BOUNCED,
    "dropped": Kind.REJECTED,
    "spamreport": Kind.COMPLAINED,
    "unsubscribe": Kind.UNSUBSCRIBED,
    "group_unsubscribe": Kind.UNSUBSCRIBED,
}
BOUNCE_CLASSES = {"bounce": BounceClass.HARD, "blocked": BounceClass.SOFT}


@lru_cache(maxsize=8)
def load_public_key(text: str) -> ec.EllipticCurvePublicKey:
    """The verification key as SendGrid shows it (base64 DER SubjectPublicKeyInfo) or as PEM.

    Raises ValueError for anything but a P-256 public key: a configuration error, not a refusal.
    """
    # cryptography (~50 ms to import) only where a key is read: the settings import this module
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        if "-----BEGIN" in text:
            key = serialization.load_pem_public_key(text.strip().encode("ascii"))
        else:
            key = serialization.load_der_public_key(base64.b64decode("".join(text.split()), validate=True))
    except (ValueError, TypeError, UnicodeEncodeError, binascii.Error, UnsupportedAlgorithm) as exc:
        raise ValueError(f"the SendGrid verification key is not a public key: {type(exc).__name__}") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(key.curve, ec.SECP256R1):
        raise ValueError("the SendGrid verification key is not an ECDSA P-256 public key")
    return key


def verify(headers: Mapping[str, str], body: bytes, public_key: str, now: datetime) -> None:
    """Raise Unauthenticated unless SendGrid signed this body less than 5 minutes from ``now``.

    ``headers`` may be any mapping (names are compared case-insensitively); ``body`` the raw bytes.
    Raises ValueError when ``public_key`` itself is unusable (see :func:`load_public_key`).
    """
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    key = load_public_key(public_key)
    lowered = {name.lower(): value for name, value in headers.items()}
    signature, timestamp = lowered.get(SIGNATURE_HEADER), lowered.get(TIMESTAMP_HEADER)
    if not signature:
        raise Unauthenticated(f"missing header {SIGNATURE_HEADER}")
    if not timestamp:
        raise Unauthenticated(f"missing header {TIMESTAMP_HEADER}")
    check_timestamp(timestamp, now, TIMESTAMP_HEADER)
    try:
        der = base64.b64decode(signature.strip(), validate=True)
        key.verify(der, timestamp.encode("ascii") + body, ec.ECDSA(hashes.SHA256()))
    except (InvalidSignature, ValueError, binascii.Error):
        raise Unauthenticated("signature does not match the body and timestamp") from None


def parse(body: bytes) -> Received:
    """The events of an authentic body (verify it first); Malformed unless it has the documented shape."""
    document = json_body(body)
    if not isinstance(document, list):
        raise Malformed("body is not a JSON array of events")
    events: list[ProviderEvent] = []
    for index, item in enumerate(document):
        event = _event(index, item)
        if event is not None:
            events.append(event)
    return Received(tuple(events))


def _event(index: int, item: Any) -> ProviderEvent | None:
    if not isinstance(item, dict):
        raise Malformed(f"event {index} is not an object")
    name = item.get("event")
    if not isinstance(name, str):
        raise Malformed(f"event {index} has no event name")
    kind = KINDS.get(name)
    if kind is None:
        return None
    event_id, email, timestamp = item.get("sg_event_id"), item.get("email"), item.get("timestamp")
    if not isinstance(event_id, str) or not event_id:
        raise Malformed(f"event {index} ({name}) has no sg_event_id")
    if not isinstance(email, str) or not email:
        raise Malformed(f"event {index} ({name}) has no email")
    if isinstance(timestamp, bool) or not isinstance(timestamp, int | float):
        raise Malformed(f"event {index} ({name}) has no numeric timestamp")
    try:
        occurred_at = datetime.fromtimestamp(timestamp, UTC)
    except (OverflowError, OSError, ValueError):
        raise Malformed(f"event {index} ({name}) has a timestamp out of range") from None
    bounce_class = None
    if kind is Kind.BOUNCED:
        bounce_type = item.get("type")
        bounce_class = BOUNCE_CLASSES.get(bounce_type, BounceClass.UNDETERMINED) if isinstance(
            bounce_type, str) else BounceClass.UNDETERMINED
    return ProviderEvent(
        provider=PROVIDER,
        provider_event_id=event_id,
        kind=kind,
        recipient=email,
        occurred_at=occurred_at,
        provider_message_id=_message_id_prefix(item.get("sg_message_id")),
        message_id=_smtp_id(item.get("smtp-id")),
        dedupe_key=_string(item.get("dedupe_key")),
        bounce_class=bounce_class,
        detail=item,
    )


def _message_id_prefix(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    return value.split(".", 1)[0].strip() or None


def _smtp_id(value: Any) -> str | None:
    if isinstance(value, str):
        text = value.strip()
        if len(text) > 2 and text.startswith("<") and text.endswith(">"):
            return text
    return None


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


# ---- the webhook scheme (webhooks.py lists it) -----------------------------------------------------


class SendgridWebhook(WebhookScheme):
    """``OUTBOX_MAILER_WEBHOOKS__SENDGRID__PUBLIC_KEY``: the Signed Event Webhook's verification key."""

    name: ClassVar[str] = PROVIDER
    public_key: str | None = None  # base64 DER, or PEM

    @field_validator("public_key")
    @classmethod
    def _key(cls, value: str | None) -> str | None:
        if value is not None:
            load_public_key(value)  # ValueError: not a P-256 public key
        return value

    def enabled(self) -> bool:
        return self.public_key is not None

    async def received(self, request: WebhookRequest) -> Received:
        verify(request.headers, request.body, self.required(self.public_key), request.now)
        return parse(request.body)
