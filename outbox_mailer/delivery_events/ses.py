"""Amazon SES event notifications delivered by Amazon SNS over HTTPS: the SNS signature, then the events.

Pure: the signing certificate is fetched by a function the caller passes in (and caches).

Scheme (Amazon SNS Developer Guide, "Verifying the signatures of Amazon SNS messages",
https://docs.aws.amazon.com/sns/latest/dg/sns-verify-signature-of-message.html and
.../sns-verify-signature-of-message-verify-message-signature.html; AWS's own validator,
aws-php-sns-message-validator, builds the same string): the string to sign is, for each field below that
the envelope holds, ``Name\\nValue\\n``, in this order:

* ``Notification``: Message, MessageId, Subject (only when present), Timestamp, TopicArn, Type;
* ``SubscriptionConfirmation`` and ``UnsubscribeConfirmation``: Message, MessageId, SubscribeURL,
  Timestamp, Token, TopicArn, Type.

``Signature`` is the base64 RSA PKCS#1 v1.5 signature of that string: SHA1withRSA for
``SignatureVersion`` 1, SHA256withRSA for 2 (any other version is refused). The key is the certificate at
``SigningCertURL``, which must be ``https://sns.<region>.amazonaws.com[.cn]/<name>.pem``: any other host
(an S3 bucket under amazonaws.com included) could serve an attacker's certificate. The envelope's
``TopicArn`` must be one of the configured topics. SNS keeps ``MessageId`` across its retries, so there is
no timestamp window here: a replay repeats ``provider_event_id`` values, which are recorded once.

Events (Amazon SES Developer Guide, "Contents of event data that Amazon SES publishes to Amazon SNS",
https://docs.aws.amazon.com/ses/latest/dg/event-publishing-retrieving-sns-contents.html, and the older
"Notification contents" for identity notifications; ``eventType`` or ``notificationType``):

==================  =========================================================  =====================
type                one event per                                              kind
==================  =========================================================  =====================
Delivery            ``delivery.recipients``                                    delivered
Bounce              ``bounce.bouncedRecipients[].emailAddress``                bounced: ``bounceType``
                                                                               Permanent hard,
                                                                               Transient soft,
                                                                               Undetermined
Complaint           ``complaint.complainedRecipients[].emailAddress``          complained
DeliveryDelay       ``deliveryDelay.delayedRecipients[].emailAddress``         delayed
Reject              ``mail.destination`` (SES found a virus and sent nothing)  rejected
others              (Send, Open, Click, Rendering Failure, Subscription, ...)  no event
==================  =========================================================  =====================

``provider_message_id`` is ``mail.messageId``, SES's id of the email: what SES's send API answers and what
its SMTP interface puts in the 250 reply to DATA (``250 Ok <messageId>``). ``message_id`` is the
Message-ID header (``mail.commonHeaders.messageId``, else ``Message-ID`` in ``mail.headers``), in angle
brackets. ``provider_event_id`` is the SNS ``MessageId`` and the recipient: stable across SNS retries,
distinct per recipient. ``detail`` is the SES event itself.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Awaitable, Callable, Collection
from datetime import datetime
from typing import Any, ClassVar

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
    unverified_json,
)

PROVIDER = "ses"
# The only hosts a SigningCertURL or SubscribeURL may name. No setting changes it: tests that serve a certificate
# on loopback replace this module attribute.
SNS_CERT_HOST = re.compile(r"sns\.[a-z0-9-]+\.amazonaws\.com(\.cn)?")
# The whole URL, strictly: no user info, port, query or fragment for a URL parser to read differently.
_CERT_URL = re.compile(r"https://(?P<host>[A-Za-z0-9.-]+)/[A-Za-z0-9._/-]*\.pem")

_CONFIRMATION_FIELDS = ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type")
SIGNED_FIELDS: dict[str, tuple[str, ...]] = {
    "Notification": ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"),
    "SubscriptionConfirmation": _CONFIRMATION_FIELDS,
    "UnsubscribeConfirmation": _CONFIRMATION_FIELDS,
}
_OPTIONAL_FIELDS = frozenset({"Subject"})
SIGNATURE_HASHES = {"1": "SHA1", "2": "SHA256"}  # SignatureVersion -> the hash of cryptography's hashes module

# SES event type -> (kind, the object that holds the recipients)
KINDS: dict[str, tuple[Kind, str]] = {
    "Delivery": (Kind.DELIVERED, "delivery"),
    "Bounce": (Kind.BOUNCED, "bounce"),
    "Complaint": (Kind.COMPLAINED, "complaint"),
    "DeliveryDelay": (Kind.DELAYED, "deliveryDelay"),
    "Reject": (Kind.REJECTED, "reject"),
}
_RECIPIENT_LISTS = {"bounce": "bouncedRecipients", "complaint": "complainedRecipients",
                    "deliveryDelay": "delayedRecipients"}
BOUNCE_CLASSES = {"Permanent": BounceClass.HARD, "Transient": BounceClass.SOFT,
                  "Undetermined": BounceClass.UNDETERMINED}


def string_to_sign(envelope: dict[str, Any]) -> bytes:
    """The canonical string SNS signs for this envelope; raises Unauthenticated if a field is missing."""
    message_type = envelope.get("Type")
    fields = SIGNED_FIELDS.get(message_type) if isinstance(message_type, str) else None
    if fields is None:
        raise Unauthenticated("not an SNS message type that is signed (Type)")
    parts = []
    for name in fields:
        value = envelope.get(name)
        if value is None and name in _OPTIONAL_FIELDS:
            continue
        if not isinstance(value, str):
            raise Unauthenticated(f"SNS envelope has no {name}")
        parts.append(f"{name}\n{value}\n")
    return "".join(parts).encode("utf-8")


def check_cert_url(url: Any) -> str:
    """``url`` if it is an https URL of a ``.pem`` on an SNS host, else Unauthenticated."""
    match = _CERT_URL.fullmatch(url) if isinstance(url, str) else None
    host = match.group("host").lower() if match else ""
    if not match or not SNS_CERT_HOST.fullmatch(host):
        raise Unauthenticated("SigningCertURL is not an https .pem URL on an Amazon SNS host")
    return match.string


async def verify(body: bytes, topic_arns: Collection[str],
                 fetch_certificate: Callable[[str], Awaitable[bytes]]) -> dict[str, Any]:
    """The SNS envelope of ``body`` once its signature is checked; Unauthenticated on anything wrong.

    ``fetch_certificate(url)`` returns the PEM certificate at an already checked ``SigningCertURL``;
    whatever it raises (a network failure is not the sender's fault) is left to the caller.
    """
    envelope = unverified_json(body, "an SNS message")
    if not isinstance(envelope, dict):
        raise Unauthenticated("body is not an SNS message (not a JSON object)")
    signed = string_to_sign(envelope)
    if envelope["TopicArn"] not in topic_arns:
        raise Unauthenticated("TopicArn is not one of the configured topics")
    version = envelope.get("SignatureVersion")
    # cryptography (~50 ms to import) only where a signature is checked: the settings import this module
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    hash_name = SIGNATURE_HASHES.get(version) if isinstance(version, str) else None
    if hash_name is None:
        raise Unauthenticated("SignatureVersion is neither 1 nor 2")
    signature_text = envelope.get("Signature")
    if not isinstance(signature_text, str):
        raise Unauthenticated("SNS envelope has no Signature")
    try:
        signature = base64.b64decode(signature_text, validate=True)
    except (ValueError, binascii.Error):
        raise Unauthenticated("Signature is not base64") from None
    url = check_cert_url(envelope.get("SigningCertURL"))
    pem = await fetch_certificate(url)
    try:
        key = x509.load_pem_x509_certificate(pem).public_key()
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise Unauthenticated("the signing certificate is not a PEM certificate") from None
    if not isinstance(key, rsa.RSAPublicKey):
        raise Unauthenticated("the signing certificate has no RSA key")
    try:
        algorithm: hashes.HashAlgorithm = getattr(hashes, hash_name)()
        key.verify(signature, signed, padding.PKCS1v15(), algorithm)
    except (InvalidSignature, ValueError):
        raise Unauthenticated("Signature does not match the message") from None
    return envelope


def parse(envelope: dict[str, Any]) -> Received:
    """What a verified SNS envelope holds: a confirmation to GET, SES events, or nothing."""
    kind = envelope.get("Type")
    if kind == "SubscriptionConfirmation":
        url = envelope.get("SubscribeURL")
        if not isinstance(url, str) or not url.startswith("https://"):
            raise Malformed("SubscriptionConfirmation without an https SubscribeURL")
        return Received((), confirm_url=url)
    if kind != "Notification":
        return Received(())
    try:
        message = json.loads(envelope["Message"])
    except (KeyError, TypeError, ValueError, RecursionError):
        raise Malformed("Message is not JSON") from None
    if not isinstance(message, dict):
        raise Malformed("Message is not an SES event (not a JSON object)")
    event_type = message.get("eventType", message.get("notificationType"))
    if not isinstance(event_type, str):
        raise Malformed("Message is not an SES event (no eventType or notificationType)")
    if event_type not in KINDS:
        return Received(())
    sns_message_id = envelope.get("MessageId")
    if not isinstance(sns_message_id, str) or not sns_message_id:
        raise Malformed("Notification without a MessageId")
    return Received(_events(sns_message_id, event_type, message))


def _events(sns_message_id: str, event_type: str, message: dict[str, Any]) -> tuple[ProviderEvent, ...]:
    kind, section_name = KINDS[event_type]
    mail, section = message.get("mail"), message.get(section_name)
    if not isinstance(mail, dict) or not isinstance(mail.get("messageId"), str) or not mail["messageId"]:
        raise Malformed(f"{event_type} without mail.messageId")
    if not isinstance(section, dict):
        raise Malformed(f"{event_type} without its {section_name} object")
    recipients = _recipients(event_type, section_name, section, mail)
    # A Reject happens on submission, so at mail.timestamp; any other event has its own time.
    occurred_at = _time(mail.get("timestamp") if kind is Kind.REJECTED else section.get("timestamp"), event_type)
    bounce_class = None
    if kind is Kind.BOUNCED:
        bounce_type = section.get("bounceType")
        bounce_class = BOUNCE_CLASSES.get(bounce_type, BounceClass.UNDETERMINED) if isinstance(
            bounce_type, str) else BounceClass.UNDETERMINED
    message_id = _header_message_id(mail)
    events: dict[str, ProviderEvent] = {}
    for recipient in recipients:
        event_id = f"{sns_message_id}:{recipient}"
        events.setdefault(event_id, ProviderEvent(
            provider=PROVIDER, provider_event_id=event_id, kind=kind, recipient=recipient,
            occurred_at=occurred_at, provider_message_id=mail["messageId"], message_id=message_id,
            bounce_class=bounce_class, detail=message))
    return tuple(events.values())


def _recipients(event_type: str, section_name: str, section: dict[str, Any], mail: dict[str, Any]) -> list[str]:
    if section_name in _RECIPIENT_LISTS:
        listed = section.get(_RECIPIENT_LISTS[section_name])
        if not isinstance(listed, list) or not all(isinstance(r, dict) for r in listed):
            raise Malformed(f"{event_type} without a list of recipient objects")
        addresses: Any = [r.get("emailAddress") for r in listed]
    else:
        addresses = section.get("recipients") if section_name == "delivery" else mail.get("destination")
        if not isinstance(addresses, list):
            raise Malformed(f"{event_type} without a list of recipients")
    found = [a for a in addresses if isinstance(a, str) and a]
    if len(found) != len(addresses):
        raise Malformed(f"{event_type} has a recipient that is not an address")
    return found


def _time(value: Any, event_type: str) -> datetime | None:
    if value is None:
        return None
    try:
        when = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise Malformed(f"{event_type} has a timestamp that is not ISO 8601") from None
    if when.tzinfo is None:
        raise Malformed(f"{event_type} has a timestamp without a time zone")
    return when


def _header_message_id(mail: dict[str, Any]) -> str | None:
    common = mail.get("commonHeaders")
    value = common.get("messageId") if isinstance(common, dict) else None
    if not isinstance(value, str) or not value.strip():
        value = None
        headers = mail.get("headers")
        for header in headers if isinstance(headers, list) else ():
            if isinstance(header, dict) and str(header.get("name", "")).lower() == "message-id":
                value = header.get("value")
                break
    if not isinstance(value, str) or not value.strip("<> \t"):
        return None
    return f"<{value.strip().strip('<>')}>"


# ---- the webhook scheme (webhooks.py lists it) -----------------------------------------------------


_ARN = re.compile(r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_.-]{1,256}$")


class SesWebhook(WebhookScheme):
    """``OUTBOX_MAILER_WEBHOOKS__SES__TOPIC_ARNS``: the SNS topics whose notifications are accepted."""

    name: ClassVar[str] = PROVIDER
    topic_arns: str | None = None  # comma-separated SNS topic ARNs

    @field_validator("topic_arns")
    @classmethod
    def _arns(cls, value: str | None) -> str | None:
        if value is not None:
            bad = [a for a in value.split(",") if not _ARN.match(a.strip())]
            if bad or not value.strip():
                raise ValueError(f"not an SNS topic ARN: {bad[0] if bad else value!r}")
        return value

    def arns(self) -> frozenset[str]:
        return frozenset(a.strip() for a in (self.topic_arns or "").split(",") if a.strip())

    def enabled(self) -> bool:
        return bool(self.arns())

    async def received(self, request: WebhookRequest) -> Received:
        return parse(await verify(request.body, self.required(self.arns() or None), request.certificate))
