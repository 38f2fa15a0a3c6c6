"""Amazon SES events through SNS: the SNS signature (versions 1 and 2) and the SES event mapping."""

from __future__ import annotations

import base64
import json
import re
import tracemalloc
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import NameOID

from outbox_mailer.delivery_events import ses
from outbox_mailer.delivery_events.model import (
    MAX_UNVERIFIED_BYTES,
    BounceClass,
    Kind,
    Malformed,
    TooLarge,
    Unauthenticated,
)

pytestmark = pytest.mark.anyio

TOPIC = "arn:aws:sns:eu-west-1:123456789012:ses-events"
CERT_URL = "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-9c6465fa7f48f5cacd23014631ec1136.pem"


def certificate(key: Any) -> bytes:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sns.amazonaws.com")])
    start = datetime(2026, 1, 1, tzinfo=UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(start).not_valid_after(start + timedelta(days=365))
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM)


KEY = rsa.generate_private_key(65537, 2048)
OTHER_KEY = rsa.generate_private_key(65537, 2048)
PEM = certificate(KEY)


class FakeFetch:
    """An async fetch_certificate that serves one PEM and records which URLs were asked for."""

    def __init__(self, pem: bytes = PEM) -> None:
        self.pem = pem
        self.urls: list[str] = []

    async def __call__(self, url: str) -> bytes:
        self.urls.append(url)
        return self.pem


def canonical(envelope: dict[str, Any]) -> bytes:
    """AWS's string to sign, written out here independently of the module under test."""
    if envelope["Type"] == "Notification":
        names = ["Message", "MessageId"] + (["Subject"] if "Subject" in envelope else []) + [
            "Timestamp", "TopicArn", "Type"]
    else:
        names = ["Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"]
    return "".join(f"{name}\n{envelope[name]}\n" for name in names).encode()


def sign(envelope: dict[str, Any], version: str = "2", key: rsa.RSAPrivateKey = KEY) -> dict[str, Any]:
    algorithm = hashes.SHA1() if version == "1" else hashes.SHA256()
    signature = key.sign(canonical(envelope), padding.PKCS1v15(), algorithm)
    return envelope | {"SignatureVersion": version, "Signature": base64.b64encode(signature).decode(),
                       "SigningCertURL": CERT_URL}


def mail(**fields: Any) -> dict[str, Any]:
    base = {"timestamp": "2026-03-14T15:09:20.000Z", "source": "shop@example.com", "messageId":
            "0102018e3c5a7c1f-4b1d2a8e-2f6c-4c1b-9d3e-7f1a2b3c4d5e-000000", "destination":
            ["zoe@example.com", "bob@example.com"], "headersTruncated": False,
            "headers": [{"name": "From", "value": "shop@example.com"},
                        {"name": "Message-ID", "value": "<0f3c9a@mail.example.com>"}],
            "commonHeaders": {"from": ["shop@example.com"], "to": ["zoe@example.com", "bob@example.com"],
                              "messageId": "<0f3c9a@mail.example.com>", "subject": "Your order"},
            "tags": {"ses:configuration-set": ["outbox"]}}
    base.update(fields)
    return base


def ses_event(event_type: str, section: dict[str, Any] | None = None, key: str = "eventType",
              **mail_fields: Any) -> dict[str, Any]:
    message: dict[str, Any] = {key: event_type, "mail": mail(**mail_fields)}
    if section is not None:
        message[event_type[0].lower() + event_type[1:]] = section
    return message


def notification(message: Any, **fields: Any) -> dict[str, Any]:
    return {"Type": "Notification", "MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324", "TopicArn": TOPIC,
            "Message": message if isinstance(message, str) else json.dumps(message),
            "Timestamp": "2026-03-14T15:09:26.123Z",
            "UnsubscribeURL": "https://sns.eu-west-1.amazonaws.com/?Action=Unsubscribe&SubscriptionArn=x"} | fields


def confirmation(kind: str = "SubscriptionConfirmation") -> dict[str, Any]:
    return {"Type": kind, "MessageId": "165545c9-2a5c-472c-8df2-7ff2be2b3b1b", "Token": "2336412f37fb687f5d51e6e",
            "TopicArn": TOPIC, "Message": f"You have chosen to subscribe to the topic {TOPIC}.\nTo confirm the "
            "subscription, visit the SubscribeURL included in this message.",
            "SubscribeURL": "https://sns.eu-west-1.amazonaws.com/?Action=ConfirmSubscription&TopicArn="
            f"{TOPIC}&Token=2336412f37fb687f5d51e6e", "Timestamp": "2026-03-14T15:09:26.123Z"}


DELIVERY = ses_event("Delivery", {"timestamp": "2026-03-14T15:09:25.500Z", "processingTimeMillis": 546,
                                  "recipients": ["zoe@example.com"], "smtpResponse": "250 ok",
                                  "reportingMTA": "a8-70.smtp-out.amazonses.com"})


def body(envelope: dict[str, Any]) -> bytes:
    return json.dumps(envelope).encode()


async def verify(envelope: dict[str, Any], fetch: FakeFetch | None = None, **kw: Any) -> dict[str, Any]:
    return await ses.verify(body(envelope), [TOPIC], fetch or FakeFetch(), **kw)


# ---- verify --------------------------------------------------------------------------------------

@pytest.mark.parametrize("version", ["1", "2"])
async def test_a_notification_signed_with_either_version_is_accepted(version: str) -> None:
    fetch = FakeFetch()
    envelope = sign(notification(DELIVERY), version)
    assert await ses.verify(body(envelope), {TOPIC, "arn:aws:sns:us-east-1:1:other"}, fetch) == envelope
    assert fetch.urls == [CERT_URL]


async def test_a_subject_is_signed_when_present() -> None:
    envelope = sign(notification(DELIVERY, Subject="Amazon SES Email Event Notification"))
    await verify(envelope)
    with pytest.raises(Unauthenticated, match="Signature"):
        await verify(envelope | {"Subject": "changed"})
    without = dict(envelope)
    del without["Subject"]
    with pytest.raises(Unauthenticated, match="Signature"):
        await verify(without)
    with pytest.raises(Unauthenticated, match="Signature"):
        await verify(sign(notification(DELIVERY)) | {"Subject": "added after signing"})


@pytest.mark.parametrize("kind", ["SubscriptionConfirmation", "UnsubscribeConfirmation"])
@pytest.mark.parametrize("version", ["1", "2"])
async def test_confirmations_are_verified_over_their_own_fields(kind: str, version: str) -> None:
    envelope = sign(confirmation(kind), version)
    assert await verify(envelope) == envelope
    for field in ("SubscribeURL", "Token"):
        with pytest.raises(Unauthenticated, match="Signature"):
            await verify(envelope | {field: envelope[field] + "x"})


@pytest.mark.parametrize("field", ["Message", "MessageId", "Timestamp", "Type"])
async def test_one_byte_changed_in_a_signed_field_is_refused(field: str) -> None:
    envelope = sign(notification(DELIVERY))
    value = envelope[field]
    if field == "Type":
        forged = envelope | {"Type": "SubscriptionConfirmation", "SubscribeURL": "https://sns.eu-west-1.amazonaws.com/",
                             "Token": "t"}
    else:
        forged = envelope | {field: value[:5] + chr(ord(value[5]) ^ 1) + value[6:]}
    with pytest.raises(Unauthenticated, match="Signature"):
        await verify(forged)


async def test_one_byte_changed_in_the_signature_is_refused() -> None:
    envelope = sign(notification(DELIVERY))
    raw = bytearray(base64.b64decode(envelope["Signature"]))
    raw[0] ^= 0x01
    with pytest.raises(Unauthenticated, match="Signature"):
        await verify(envelope | {"Signature": base64.b64encode(raw).decode()})


async def test_a_signature_by_another_key_is_refused() -> None:
    with pytest.raises(Unauthenticated, match="Signature"):
        await verify(sign(notification(DELIVERY), key=OTHER_KEY))
    await verify(sign(notification(DELIVERY), key=OTHER_KEY), FakeFetch(certificate(OTHER_KEY)))


async def test_a_version_1_signature_relabelled_as_version_2_is_refused() -> None:
    envelope = sign(notification(DELIVERY), "1")
    with pytest.raises(Unauthenticated, match="Signature"):
        await verify(envelope | {"SignatureVersion": "2"})


@pytest.mark.parametrize("version", ["3", "0", "", 2, None])
async def test_an_unknown_signature_version_is_refused_before_any_fetch(version: Any) -> None:
    envelope = sign(notification(DELIVERY)) | {"SignatureVersion": version}
    fetch = FakeFetch()
    with pytest.raises(Unauthenticated, match="SignatureVersion"):
        await verify(envelope, fetch)
    assert fetch.urls == []


async def test_another_topic_is_refused_before_any_fetch() -> None:
    fetch = FakeFetch()
    envelope = sign(notification(DELIVERY, TopicArn="arn:aws:sns:eu-west-1:999999999999:ses-events"))
    with pytest.raises(Unauthenticated, match="TopicArn"):
        await verify(envelope, fetch)
    with pytest.raises(Unauthenticated, match="TopicArn"):
        await ses.verify(body(sign(notification(DELIVERY))), [], fetch)
    assert fetch.urls == []


@pytest.mark.parametrize("url", [
    "http://sns.eu-west-1.amazonaws.com/SimpleNotificationService-1.pem",
    "https://s3.eu-west-1.amazonaws.com/SimpleNotificationService-1.pem",
    "https://attacker-bucket.s3.amazonaws.com/SimpleNotificationService-1.pem",
    "https://sns.eu-west-1.amazonaws.com.evil.example/SimpleNotificationService-1.pem",
    "https://evil.example/sns.eu-west-1.amazonaws.com/x.pem",
    "https://sns.eu-west-1.amazonaws.com@evil.example/SimpleNotificationService-1.pem",
    "https://sns.eu-west-1.amazonaws.com:8443/SimpleNotificationService-1.pem",
    "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-1.pem?x=.pem",
    "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-1.pem#frag",
    "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-1.crt",
    "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-1.pem\n",
    "https://sns..amazonaws.com/x.pem",
    "//sns.eu-west-1.amazonaws.com/x.pem",
    "",
])
async def test_a_certificate_url_off_an_sns_https_host_is_refused_before_any_fetch(url: str) -> None:
    fetch = FakeFetch()
    with pytest.raises(Unauthenticated, match="SigningCertURL"):
        await verify(sign(notification(DELIVERY)) | {"SigningCertURL": url}, fetch)
    assert fetch.urls == []


@pytest.mark.parametrize("url", ["https://sns.cn-north-1.amazonaws.com.cn/SimpleNotificationService-1.pem",
                                 "https://sns.us-gov-west-1.amazonaws.com/SimpleNotificationService-1.pem",
                                 "https://SNS.EU-WEST-1.AMAZONAWS.COM/SimpleNotificationService-1.pem"])
async def test_every_sns_region_host_is_accepted(url: str) -> None:
    fetch = FakeFetch()
    await verify(sign(notification(DELIVERY)) | {"SigningCertURL": url}, fetch)
    assert fetch.urls == [url]


async def test_only_the_modules_host_pattern_admits_another_host_and_https_stays_required(
        monkeypatch: pytest.MonkeyPatch) -> None:
    local = "https://certs.test/sns.pem"
    fetch = FakeFetch()
    envelope = sign(notification(DELIVERY)) | {"SigningCertURL": local}
    with pytest.raises(Unauthenticated, match="SigningCertURL"):
        await verify(envelope)
    monkeypatch.setattr(ses, "SNS_CERT_HOST", re.compile(r"certs\.test"))  # what a test serving certificates does
    await verify(envelope, fetch)
    assert fetch.urls == [local]
    with pytest.raises(Unauthenticated, match="SigningCertURL"):
        await verify(envelope | {"SigningCertURL": "http://certs.test/sns.pem"})


@pytest.mark.parametrize("field", ["Message", "MessageId", "Timestamp", "TopicArn", "Type", "Signature",
                                   "SigningCertURL", "SignatureVersion"])
async def test_a_missing_field_is_refused(field: str) -> None:
    envelope = sign(notification(DELIVERY))
    del envelope[field]
    with pytest.raises(Unauthenticated):
        await verify(envelope)


@pytest.mark.parametrize("field", ["SubscribeURL", "Token", "Message", "TopicArn"])
async def test_a_confirmation_missing_a_signed_field_is_refused_before_any_fetch(field: str) -> None:
    signed = sign(confirmation())
    fetch = FakeFetch()
    with pytest.raises(Unauthenticated, match=field):
        await verify({k: v for k, v in signed.items() if k != field}, fetch)
    with pytest.raises(Unauthenticated, match=field):
        await verify(signed | {field: None}, fetch)
    assert fetch.urls == []


@pytest.mark.parametrize("raw", [b"", b"not json", b"[]", b"\"Notification\"", b"{\"Type\": \"Other\"}",
                                 b"{\"Type\": [\"Notification\"]}", b"\xff"])
async def test_a_body_that_is_no_sns_message_is_refused(raw: bytes) -> None:
    with pytest.raises(Unauthenticated):
        await ses.verify(raw, [TOPIC], FakeFetch())


async def test_a_signature_that_is_not_base64_is_refused() -> None:
    with pytest.raises(Unauthenticated, match="base64"):
        await verify(sign(notification(DELIVERY)) | {"Signature": "not base64!"})


@pytest.mark.parametrize("pem", [b"not a certificate", certificate(ec.generate_private_key(ec.SECP256R1()))])
async def test_a_fetched_certificate_that_is_unusable_is_refused(pem: bytes) -> None:
    with pytest.raises(Unauthenticated, match="certificate"):
        await verify(sign(notification(DELIVERY)), FakeFetch(pem))


async def test_a_failed_fetch_is_left_to_the_caller() -> None:
    async def unreachable(url: str) -> bytes:
        raise OSError("network is unreachable")

    with pytest.raises(OSError, match="unreachable"):
        await ses.verify(body(sign(notification(DELIVERY))), [TOPIC], unreachable)


# ---- parse ---------------------------------------------------------------------------------------

def events(message: Any, **fields: Any) -> tuple[Any, ...]:
    received = ses.parse(notification(message, **fields))
    assert received.confirm_url is None and received.replay_token is None
    return received.events


def test_a_subscription_confirmation_gives_the_url_to_get_and_no_event() -> None:
    received = ses.parse(confirmation())
    assert received.events == () and received.confirm_url == confirmation()["SubscribeURL"]
    assert ses.parse(confirmation("UnsubscribeConfirmation")) == ses.parse({"Type": "UnsubscribeConfirmation"})
    assert ses.parse(confirmation("UnsubscribeConfirmation")).confirm_url is None
    with pytest.raises(Malformed):
        ses.parse(confirmation() | {"SubscribeURL": "http://sns.eu-west-1.amazonaws.com/?Action=ConfirmSubscription"})


def test_a_delivery_carries_every_match_key() -> None:
    [delivered] = events(DELIVERY)
    assert delivered.provider == "ses" and delivered.kind is Kind.DELIVERED
    assert delivered.recipient == "zoe@example.com" and delivered.bounce_class is None
    assert delivered.provider_message_id == "0102018e3c5a7c1f-4b1d2a8e-2f6c-4c1b-9d3e-7f1a2b3c4d5e-000000"
    assert delivered.message_id == "<0f3c9a@mail.example.com>" and delivered.dedupe_key is None
    assert delivered.provider_event_id == "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324:zoe@example.com"
    assert delivered.occurred_at == datetime(2026, 3, 14, 15, 9, 25, 500000, tzinfo=UTC)
    assert delivered.detail == DELIVERY


def recipients(*addresses: str, **extra: Any) -> list[dict[str, Any]]:
    return [{"emailAddress": a, **extra} for a in addresses]


@pytest.mark.parametrize(("bounce_type", "expected"), [("Permanent", BounceClass.HARD), ("Transient", BounceClass.SOFT),
                                                       ("Undetermined", BounceClass.UNDETERMINED),
                                                       ("Something", BounceClass.UNDETERMINED)])
def test_a_bounce_gives_one_event_per_bounced_recipient_with_its_class(bounce_type: str,
                                                                      expected: BounceClass) -> None:
    bounce = {"bounceType": bounce_type, "bounceSubType": "General", "timestamp": "2026-03-14T15:09:30.000Z",
              "feedbackId": "0102018e-f1", "bouncedRecipients": recipients(
                  "zoe@example.com", "bob@example.com", action="failed", status="5.1.1",
                  diagnosticCode="smtp; 550 5.1.1 user unknown")}
    parsed = events(ses_event("Bounce", bounce))
    assert [(e.kind, e.bounce_class, e.recipient) for e in parsed] == [
        (Kind.BOUNCED, expected, "zoe@example.com"), (Kind.BOUNCED, expected, "bob@example.com")]
    assert len({e.provider_event_id for e in parsed}) == 2
    assert parsed[0].occurred_at == datetime(2026, 3, 14, 15, 9, 30, tzinfo=UTC)


@pytest.mark.parametrize(("event_type", "section", "kind", "expected_recipients"), [
    ("Complaint", {"complainedRecipients": recipients("zoe@example.com"), "timestamp": "2026-03-15T08:00:00Z",
                   "complaintFeedbackType": "abuse", "feedbackId": "f"}, Kind.COMPLAINED, ["zoe@example.com"]),
    ("DeliveryDelay", {"delayType": "MailboxFull", "expirationTime": "2026-03-15T15:09:20Z",
                       "delayedRecipients": recipients("bob@example.com", status="4.2.2"),
                       "timestamp": "2026-03-14T16:00:00Z"}, Kind.DELAYED, ["bob@example.com"]),
    ("Reject", {"reason": "Bad content"}, Kind.REJECTED, ["zoe@example.com", "bob@example.com"]),
])
def test_each_other_mapped_type(event_type: str, section: dict[str, Any], kind: Kind,
                                expected_recipients: list[str]) -> None:
    parsed = events(ses_event(event_type, section))
    assert [(e.kind, e.recipient, e.bounce_class) for e in parsed] == [(kind, r, None) for r in expected_recipients]


def test_a_reject_happens_when_the_mail_was_submitted() -> None:
    [first, _] = events(ses_event("Reject", {"reason": "Bad content"}))
    assert first.occurred_at == datetime(2026, 3, 14, 15, 9, 20, tzinfo=UTC)


def test_identity_notifications_use_notification_type() -> None:
    bounce = {"bounceType": "Permanent", "bouncedRecipients": recipients("zoe@example.com")}
    [parsed] = events(ses_event("Bounce", bounce, key="notificationType"))
    assert (parsed.kind, parsed.bounce_class) == (Kind.BOUNCED, BounceClass.HARD) and parsed.occurred_at is None
    assert events({"notificationType": "AmazonSnsSubscriptionSucceeded", "message": "You have successfully "
                   "subscribed your Amazon SNS topic"}) == ()


@pytest.mark.parametrize("event_type", ["Send", "Open", "Click", "Rendering Failure", "Subscription", "Future"])
def test_other_types_give_no_event(event_type: str) -> None:
    assert events(ses_event(event_type, {})) == ()


def test_the_message_id_comes_from_common_headers_else_the_raw_header_in_angle_brackets() -> None:
    no_common = ses_event("Delivery", {"recipients": ["zoe@example.com"]}, commonHeaders={"from": ["x"]})
    assert events(no_common)[0].message_id == "<0f3c9a@mail.example.com>"
    bare = ses_event("Delivery", {"recipients": ["zoe@example.com"]}, commonHeaders={"messageId": "abc@x.test"})
    assert events(bare)[0].message_id == "<abc@x.test>"
    neither = ses_event("Delivery", {"recipients": ["zoe@example.com"]}, commonHeaders={}, headers=[])
    assert events(neither)[0].message_id is None


def test_a_recipient_listed_twice_is_one_event() -> None:
    twice = ses_event("Delivery", {"recipients": ["zoe@example.com", "zoe@example.com"]})
    assert len(events(twice)) == 1


def test_the_event_id_is_the_same_on_every_sns_retry_and_another_for_another_message() -> None:
    first = events(DELIVERY)[0].provider_event_id
    assert events(DELIVERY)[0].provider_event_id == first
    assert events(DELIVERY, MessageId="other")[0].provider_event_id == "other:zoe@example.com"


@pytest.mark.parametrize("message", [
    "not json", "[]", json.dumps({"mail": mail()}), json.dumps({"eventType": 3, "mail": mail()}),
    json.dumps({"eventType": "Delivery", "delivery": {"recipients": ["a@x.test"]}}),
    json.dumps(ses_event("Delivery", {"recipients": ["a@x.test"]}, messageId="")),
    json.dumps(ses_event("Delivery", {"recipients": ["a@x.test"]}) | {"mail": "m"}),
    json.dumps(ses_event("Delivery", None)),
    json.dumps(ses_event("Delivery", {"recipients": "a@x.test"})),
    json.dumps(ses_event("Delivery", {"recipients": [7]})),
    json.dumps(ses_event("Bounce", {"bounceType": "Permanent", "bouncedRecipients": ["a@x.test"]})),
    json.dumps(ses_event("Bounce", {"bounceType": "Permanent", "bouncedRecipients": [{"status": "5.1.1"}]})),
    json.dumps(ses_event("Complaint", {"complainedRecipients": None})),
    json.dumps(ses_event("Reject", {"reason": "Bad content"}, destination=None)),
    json.dumps(ses_event("Delivery", {"recipients": ["a@x.test"], "timestamp": "yesterday"})),
    json.dumps(ses_event("Delivery", {"recipients": ["a@x.test"], "timestamp": "2026-03-14T15:09:25"})),
    json.dumps(ses_event("Delivery", {"recipients": ["a@x.test"], "timestamp": 1773500966})),
])
def test_a_notification_not_shaped_as_documented_is_malformed(message: str) -> None:
    with pytest.raises(Malformed):
        events(message)


def test_a_notification_without_message_or_message_id_is_malformed() -> None:
    envelope = notification(DELIVERY)
    for field in ("Message", "MessageId"):
        with pytest.raises(Malformed):
            ses.parse({k: v for k, v in envelope.items() if k != field})


async def test_an_envelope_of_many_small_values_is_refused_before_it_is_parsed() -> None:
    envelope = sign(notification(DELIVERY)) | {"Padding": [[]] * 300_000}
    hostile = json.dumps(envelope, separators=(",", ":")).encode()
    assert len(hostile) < MAX_UNVERIFIED_BYTES
    fetch = FakeFetch()
    tracemalloc.start()
    try:
        with pytest.raises(Unauthenticated):
            await ses.verify(hostile, [TOPIC], fetch)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * len(hostile) and fetch.urls == []


async def test_an_envelope_over_the_unverified_limit_is_refused_unparsed() -> None:
    envelope = sign(notification(DELIVERY)) | {"Padding": "x" * MAX_UNVERIFIED_BYTES}
    with pytest.raises(TooLarge):
        await ses.verify(json.dumps(envelope).encode(), [TOPIC], FakeFetch())
