"""Postmark webhooks: HTTP Basic credentials, then one record per request. Pure: no I/O.

The scheme: Postmark signs nothing; a webhook URL carries credentials
(``https://user:password@host/webhooks/postmark``) and Postmark sends them as
``Authorization: Basic base64(user:password)``. Both parts are compared in constant time, and both
are always compared, so the time taken does not tell which one was wrong. The body is not covered
by any check: TLS and the secrecy of the password are all there is.

Records (``RecordType`` -> kind; the delivery, bounce, spam complaint and subscription change
pages under https://postmarkapp.com/developer/webhooks/, and the bounce types of
https://postmarkapp.com/developer/api/bounce-api#bounce-types):

======================================  =====================================================
``Delivery``                            delivered
``Bounce``                              bounced, the class from ``Type`` (below); ``Type``
                                        ``SpamComplaint`` is complained, and the types by which
                                        Postmark itself refused to send (``ManuallyDeactivated``,
                                        ``SMTPApiError``, ``TemplateRenderingFailed``) rejected
``SpamComplaint``                       complained
``SubscriptionChange``, suppressing     unsubscribed when the recipient asked for it
                                        (``SuppressionReason`` ManualSuppression, ``Origin``
                                        Recipient: Postmark's unsubscribe link); otherwise
                                        rejected: Postmark will refuse to send to the address (a
                                        hard bounce or a complaint, which their own Bounce and
                                        SpamComplaint records report, or a suppression by the
                                        account or Postmark's staff)
``SubscriptionChange``, reactivating    no event
``Open``, ``Click``, anything else      no event
======================================  =====================================================

Bounce classes: HardBounce, BadEmailAddress -> hard (the address does not exist or is not valid);
Transient, SoftBounce, DnsError -> soft (temporary); every other type -> undetermined (auto-replies,
ISP blocks, DMARC, spam notifications, unknown...: none says the address is gone).

``provider_event_id``: ``Bounce:<ID>`` / ``SpamComplaint:<ID>`` (Postmark's bounce ID); for the other
records, which carry no id, ``<RecordType>:`` + a SHA-256 of RecordType, MessageID, recipient and the
record's timestamp, so that a retried webhook gets the same id. ``provider_message_id`` is
``MessageID``; ``dedupe_key`` is ``Metadata.dedupe_key``, added on send by our transport.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import SecretStr, model_validator

from .model import (
    BounceClass,
    Kind,
    Malformed,
    ProviderEvent,
    Received,
    Unauthenticated,
    WebhookRequest,
    WebhookScheme,
    iso_time,
    json_object,
)

PROVIDER = "postmark"
DEDUPE_METADATA = "dedupe_key"  # the Metadata field outbox_mailer.providers.postmark sends the row's key in

HARD_TYPES = frozenset({"HardBounce", "BadEmailAddress"})
SOFT_TYPES = frozenset({"Transient", "SoftBounce", "DnsError"})
REFUSED_TYPES = frozenset({"ManuallyDeactivated", "SMTPApiError", "TemplateRenderingFailed"})
TYPE_NAMES: dict[int, str] = {  # TypeCode -> Type, for a record that gives only the code
    1: "HardBounce", 2: "Transient", 16: "Unsubscribe", 32: "Subscribe", 64: "AutoResponder",
    128: "AddressChange", 256: "DnsError", 512: "SpamNotification", 1024: "OpenRelayTest", 2048: "Unknown",
    4096: "SoftBounce", 8192: "VirusNotification", 16384: "ChallengeVerification", 100000: "BadEmailAddress",
    100001: "SpamComplaint", 100002: "ManuallyDeactivated", 100003: "Unconfirmed", 100006: "Blocked",
    100007: "SMTPApiError", 100008: "InboundError", 100009: "DMARCPolicy", 100010: "TemplateRenderingFailed",
}  # fmt: skip
TIMESTAMP_FIELDS = {"Delivery": "DeliveredAt", "Bounce": "BouncedAt", "SpamComplaint": "BouncedAt",
                    "SubscriptionChange": "ChangedAt"}


# ---- verification ------------------------------------------------------------------------------


def verify(headers: Mapping[str, str], body: bytes, username: str, password: str) -> None:
    """Return when ``headers["authorization"]`` is ``Basic`` with ``username`` and ``password``.

    ``body`` is not checked (Basic credentials do not cover it); it is taken so that every provider's
    ``verify`` reads the same request. Raises :class:`Unauthenticated` when the header is missing,
    not Basic, not base64 of ``user:password``, or names other credentials, and when no credentials
    are configured (an empty user or password would let ``Basic Og==`` in).
    """
    if not username or not password:
        raise Unauthenticated("no Postmark webhook credentials are configured")
    header = headers.get("authorization", "").strip()
    if not header:
        raise Unauthenticated("missing authorization header")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "basic" or not token.strip():
        raise Unauthenticated("the authorization header is not Basic credentials")
    try:
        decoded = base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise Unauthenticated("the Basic credentials are not base64") from None
    given_user, colon, given_password = decoded.partition(b":")
    if not colon:
        raise Unauthenticated("the Basic credentials are not user:password")
    user_ok = hmac.compare_digest(given_user, username.encode())
    password_ok = hmac.compare_digest(given_password, password.encode())
    if not (user_ok & password_ok):
        raise Unauthenticated("wrong Postmark webhook credentials")


# ---- parsing -----------------------------------------------------------------------------------


def parse(body: bytes) -> Received:
    """The event of an authentic body (call :func:`verify` first); :class:`Malformed` when the body is
    not a JSON object with a string ``RecordType``, or a field we read has the wrong type."""
    record = json_object(body)
    record_type = record.get("RecordType")
    if not isinstance(record_type, str) or not record_type:
        raise Malformed("the body has no RecordType")
    bounce_class: BounceClass | None = None
    if record_type == "Delivery":
        kind = Kind.DELIVERED
    elif record_type == "SpamComplaint":
        kind = Kind.COMPLAINED
    elif record_type == "Bounce":
        kind, bounce_class = _bounce(record)
    elif record_type == "SubscriptionChange":
        suppress = record.get("SuppressSending")
        if not isinstance(suppress, bool):
            raise Malformed("SuppressSending is not a boolean")
        if not suppress:
            return Received(events=())  # a reactivation: nothing happened to a message
        unsubscribed = record.get("SuppressionReason") == "ManualSuppression" and record.get("Origin") == "Recipient"
        kind = Kind.UNSUBSCRIBED if unsubscribed else Kind.REJECTED
    else:
        return Received(events=())  # Open, Click, and types Postmark may add
    recipient = _string(record, "Recipient" if record_type in ("Delivery", "SubscriptionChange") else "Email")
    message_id = _string(record, "MessageID") or _string(record, "MessageId")
    stamp_field = TIMESTAMP_FIELDS[record_type]
    event = ProviderEvent(
        provider=PROVIDER,
        provider_event_id=_event_id(record, record_type, message_id, recipient, _string(record, stamp_field)),
        kind=kind,
        recipient=recipient,
        occurred_at=iso_time(record.get(stamp_field)),
        provider_message_id=message_id,
        dedupe_key=_dedupe_key(record.get("Metadata")),
        bounce_class=bounce_class,
        detail=record,
    )
    return Received(events=(event,))


def bounce_type(record: Mapping[str, Any]) -> str | None:
    """A Bounce record's ``Type`` (``TypeCode`` translated when only the code is given)."""
    name = record.get("Type")
    if isinstance(name, str) and name:
        return name
    code = record.get("TypeCode")
    return TYPE_NAMES.get(code) if isinstance(code, int) and not isinstance(code, bool) else None


def bounce_class(name: str | None) -> BounceClass:
    if name in HARD_TYPES:
        return BounceClass.HARD
    if name in SOFT_TYPES:
        return BounceClass.SOFT
    return BounceClass.UNDETERMINED


def _bounce(record: Mapping[str, Any]) -> tuple[Kind, BounceClass | None]:
    name = bounce_type(record)
    if name == "SpamComplaint":
        return Kind.COMPLAINED, None
    if name in REFUSED_TYPES:
        return Kind.REJECTED, None  # Postmark did not try: the address is deactivated, or the message broken
    return Kind.BOUNCED, bounce_class(name)


def _event_id(record: Mapping[str, Any], record_type: str, message_id: str | None, recipient: str | None,
              stamp: str | None) -> str:
    if record_type in ("Bounce", "SpamComplaint"):
        bounce_id = record.get("ID")
        if isinstance(bounce_id, int) and not isinstance(bounce_id, bool):
            return f"{record_type}:{bounce_id}"
        if isinstance(bounce_id, str) and bounce_id:
            return f"{record_type}:{bounce_id}"
        if bounce_id is not None:
            raise Malformed("ID is not a number")
    material = json.dumps([record_type, message_id, recipient, stamp], separators=(",", ":"))
    return f"{record_type}:{hashlib.sha256(material.encode()).hexdigest()}"


def _string(record: Mapping[str, Any], name: str) -> str | None:
    """A string field, None when absent, null or empty; :class:`Malformed` when of another type."""
    value = record.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise Malformed(f"{name} is not a string")
    return value.strip() or None


def _dedupe_key(metadata: Any) -> str | None:
    value = metadata.get(DEDUPE_METADATA) if isinstance(metadata, dict) else None
    return value if isinstance(value, str) and value else None


# ---- the webhook scheme (webhooks.py lists it) -----------------------------------------------------


class PostmarkWebhook(WebhookScheme):
    """``OUTBOX_MAILER_WEBHOOKS__POSTMARK__USERNAME`` and ``__PASSWORD``: the HTTP basic auth credentials
    set in the webhook's URL at Postmark, both or neither."""

    name: ClassVar[str] = PROVIDER
    username: str | None = None
    password: SecretStr | None = None

    @model_validator(mode="after")
    def _both(self) -> PostmarkWebhook:
        if self.password is None:
            if self.username is not None:
                raise ValueError("set both USERNAME and PASSWORD, or neither")
            return self
        if self.username is None:
            raise ValueError("set both USERNAME and PASSWORD, or neither")
        if not (self.username and self.password.get_secret_value()):
            raise ValueError("USERNAME and PASSWORD must not be empty")
        return self

    def enabled(self) -> bool:
        return self.username is not None

    async def received(self, request: WebhookRequest) -> Received:
        password = self.required(self.password).get_secret_value()
        verify(request.headers, request.body, self.required(self.username), password)
        return parse(request.body)
