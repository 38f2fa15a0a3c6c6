"""Resend webhooks: Svix signatures, then ``email.*`` events. Pure: no I/O, the clock is a parameter.

The scheme (Svix, as Resend documents it): every request carries ``svix-id``, ``svix-timestamp``
(Unix seconds) and ``svix-signature``; the endpoint's secret is ``whsec_`` + base64 of the HMAC
key; the signature is ``base64(HMAC-SHA256(key, f"{svix-id}.{svix-timestamp}.{raw body}"))``, and
the header holds one or more space-separated ``v1,<signature>`` entries (several while a secret is
rotated: one match is enough). A timestamp more than five minutes from ``now`` either way is refused,
so a captured request cannot be replayed later; Svix's own retries are signed afresh, and keep their
``svix-id``.

Implemented with the standard library, not the ``svix``/``standardwebhooks`` package: that
package reads the wall clock inside ``verify`` (``now`` could not be pinned), decodes the secret
leniently, and lets malformed signature entries raise ``ValueError`` instead of a refusal.

Events (``type`` -> kind; https://resend.com/docs/webhooks/event-types):

=========================  ==========================================================
``email.delivered``        delivered
``email.delivery_delayed`` delayed
``email.bounced``          bounced; ``data.bounce.type`` Permanent -> hard, Transient
                           or Temporary -> soft, anything else -> undetermined
``email.complained``       complained
``email.suppressed``       rejected (Resend refused to send: its suppression list)
``email.failed``           rejected (Resend refused to send: quota, domain, API key...)
anything else              no event (``email.sent``, ``email.opened``, ``email.clicked``,
                           ``email.scheduled``, ``email.received``, ``contact.*``,
                           ``domain.*``, ``suppression.*``...)
=========================  ==========================================================

One event per address in ``data.to``. ``provider_event_id`` is the ``svix-id`` (a retry of the same
webhook keeps it), with ``:<address>`` appended when the body names several addresses so that each
recipient's event stays unique; ``provider_message_id`` is ``data.email_id``; ``dedupe_key`` is the
``dedupe_key`` tag our transport added on send (``data.tags``, an object of name -> value).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from datetime import datetime
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
    iso_time,
    json_object,
)

PROVIDER = "resend"
SECRET_PREFIX = "whsec_"
DEDUPE_TAG = "dedupe_key"  # the tag name outbox_mailer.providers.resend sends the row's key under

KINDS: dict[str, Kind] = {
    "email.delivered": Kind.DELIVERED,
    "email.delivery_delayed": Kind.DELAYED,
    "email.bounced": Kind.BOUNCED,
    "email.complained": Kind.COMPLAINED,
    "email.suppressed": Kind.REJECTED,
    "email.failed": Kind.REJECTED,
}
BOUNCE_CLASSES: dict[str, BounceClass] = {
    "permanent": BounceClass.HARD,
    "transient": BounceClass.SOFT,
    "temporary": BounceClass.SOFT,  # the wording of Resend's field description
}


# ---- verification ------------------------------------------------------------------------------


def signing_key(secret: str) -> bytes:
    """The HMAC key of a ``whsec_<base64>`` secret; :class:`Unauthenticated` when it is not one."""
    if not secret.startswith(SECRET_PREFIX):
        raise Unauthenticated("the Resend webhook secret is not of the form whsec_<base64>")
    encoded = secret[len(SECRET_PREFIX):]
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise Unauthenticated("the Resend webhook secret is not of the form whsec_<base64>") from None
    if not key:
        raise Unauthenticated("the Resend webhook secret is empty")
    return key


def verify(headers: Mapping[str, str], body: bytes, secret: str, now: datetime) -> None:
    """Return when ``body`` is signed with ``secret`` and was sent within five minutes of ``now``.

    ``headers`` has lower-case names. Raises :class:`Unauthenticated` for a missing header, a secret
    that is not ``whsec_<base64>``, a timestamp outside the tolerance, or no matching signature.
    ``now`` is timezone-aware.
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    key = signing_key(secret)
    values = {}
    for name in ("svix-id", "svix-timestamp", "svix-signature"):
        value = headers.get(name, "").strip()
        if not value:
            raise Unauthenticated(f"missing {name} header")
        values[name] = value
    msg_id, timestamp, signatures = values["svix-id"], values["svix-timestamp"], values["svix-signature"]
    check_timestamp(timestamp, now, "svix-timestamp")
    expected = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    matched = False
    for entry in signatures.split():
        version, _, encoded = entry.partition(",")
        if version != "v1":
            continue  # v1a (asymmetric) and unknown versions: not ours to check
        try:
            given = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            continue
        matched |= hmac.compare_digest(expected, given)
    if not matched:
        raise Unauthenticated("no svix-signature entry matches the body")


# ---- parsing -----------------------------------------------------------------------------------


def parse(body: bytes, svix_id: str) -> Received:
    """The events of an authentic body (call :func:`verify` first); :class:`Malformed` when the body is
    not a JSON object with a string ``type`` and an object ``data``."""
    document = json_object(body)
    event_type, data = document.get("type"), document.get("data")
    if not isinstance(event_type, str) or not event_type:
        raise Malformed("the body has no type")
    if not isinstance(data, dict):
        raise Malformed("the body has no data object")
    kind = KINDS.get(event_type)
    if kind is None:
        return Received(events=())
    recipients = _recipients(data.get("to"))
    email_id = data.get("email_id")
    if email_id is not None and not isinstance(email_id, str):
        raise Malformed("data.email_id is not a string")
    bounce_class = _bounce_class(data.get("bounce")) if kind is Kind.BOUNCED else None
    occurred_at = iso_time(document.get("created_at"))
    dedupe_key = _dedupe_key(data.get("tags"))
    events = tuple(
        ProviderEvent(
            provider=PROVIDER,
            provider_event_id=svix_id if len(recipients) <= 1 else f"{svix_id}:{recipient}",
            kind=kind,
            recipient=recipient,
            occurred_at=occurred_at,
            provider_message_id=email_id or None,
            dedupe_key=dedupe_key,
            bounce_class=bounce_class,
            detail=document,
        )
        for recipient in ([*recipients] if recipients else [None])
    )
    return Received(events=events)


def _recipients(value: Any) -> list[str]:
    """``data.to``: a list of addresses (a lone string is taken as one), duplicates dropped."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise Malformed("data.to is not a list of addresses")
    return list(dict.fromkeys(item.strip() for item in value if item.strip()))


def _bounce_class(bounce: Any) -> BounceClass:
    bounce_type = bounce.get("type") if isinstance(bounce, dict) else None
    if not isinstance(bounce_type, str):
        return BounceClass.UNDETERMINED
    return BOUNCE_CLASSES.get(bounce_type.strip().lower(), BounceClass.UNDETERMINED)


def _dedupe_key(tags: Any) -> str | None:
    """The ``dedupe_key`` tag: Resend's webhooks give tags as an object of name -> value; a list of
    ``{"name", "value"}`` (the shape they are sent in) is read too."""
    value: Any = None
    if isinstance(tags, dict):
        value = tags.get(DEDUPE_TAG)
    elif isinstance(tags, list):
        value = next((tag.get("value") for tag in tags if isinstance(tag, dict) and tag.get("name") == DEDUPE_TAG),
                     None)
    return value if isinstance(value, str) and value else None


# ---- the webhook scheme (webhooks.py lists it) -----------------------------------------------------


class ResendWebhook(WebhookScheme):
    """``OUTBOX_MAILER_WEBHOOKS__RESEND__SECRET``: the endpoint's Svix signing secret."""

    name: ClassVar[str] = PROVIDER
    secret: SecretStr | None = None  # the endpoint's Svix signing secret, whsec_...

    @field_validator("secret")
    @classmethod
    def _secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().startswith(SECRET_PREFIX):
            raise ValueError("expected the signing secret Resend shows for the endpoint, starting with whsec_")
        return value

    def enabled(self) -> bool:
        return self.secret is not None

    async def received(self, request: WebhookRequest) -> Received:
        verify(request.headers, request.body, self.required(self.secret).get_secret_value(), request.now)
        return parse(request.body, request.headers["svix-id"])
