"""SendGrid's Signed Event Webhook (ECDSA P-256 over timestamp + body) and its event mapping."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from outbox_mailer.delivery_events import sendgrid
from outbox_mailer.delivery_events.model import TOLERANCE_SECONDS, BounceClass, Kind, Malformed, Unauthenticated

NOW = datetime(2026, 3, 14, 15, 9, 26, tzinfo=UTC)
TS = str(int(NOW.timestamp()))
PRIVATE = ec.generate_private_key(ec.SECP256R1())
OTHER = ec.generate_private_key(ec.SECP256R1())


def shown(key: ec.EllipticCurvePrivateKey) -> str:
    """The public key as SendGrid's settings page shows it: base64 DER SubjectPublicKeyInfo."""
    der = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(der).decode()


PUBLIC = shown(PRIVATE)


def signed(body: bytes, timestamp: str = TS, key: ec.EllipticCurvePrivateKey = PRIVATE) -> dict[str, str]:
    signature = key.sign(timestamp.encode() + body, ec.ECDSA(hashes.SHA256()))
    return {"X-Twilio-Email-Event-Webhook-Signature": base64.b64encode(signature).decode(),
            "X-Twilio-Email-Event-Webhook-Timestamp": timestamp}


def event(name: str, **fields: Any) -> dict[str, Any]:
    base = {"email": "zoe@example.com", "timestamp": 1773500966, "smtp-id": "<14c5d75ce93.dfd.64b469@ismtpd-555>",
            "event": name, "sg_event_id": f"evt-{name}", "category": ["receipts"],
            "sg_message_id": "W7X8aQ9sTx2n.filterdrecv-p3mdw1-756b745b58-kmzbl-18-5F5FC76C-9.0",
            "dedupe_key": "order-42"}
    base.update(fields)
    return base


BODY = json.dumps([event("delivered", response="250 OK")]).encode() + b"\r\n"


# ---- verify --------------------------------------------------------------------------------------

def test_a_body_signed_with_the_key_is_accepted() -> None:
    sendgrid.verify(signed(BODY), BODY, PUBLIC, NOW)


def test_header_names_are_case_insensitive_and_a_pem_key_is_accepted() -> None:
    headers = {name.lower(): value for name, value in signed(BODY).items()}
    pem = PRIVATE.public_key().public_bytes(serialization.Encoding.PEM,
                                            serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    sendgrid.verify(headers, BODY, pem, NOW)


def test_sendgrids_published_example_verifies() -> None:
    """The vector of SendGrid's own libraries (sendgrid-python test_eventwebhook): our scheme is theirs."""
    key = ("MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1flpVKS3GRqe62gw+2fNNRaIN"
           "XvVpiglSI8eNEc6wEA3F+g==")
    signature = ("MEUCIGHQVtGj+Y3LkG9fLcxf3qfI10QysgDWmMOVmxG0u6ZUAiEAyBiXDWzM+uOe5W0JuG+luQAbPIqHh89M15TluLtEZtM=")
    payload = json.dumps([{
        "email": "hello@world.com", "event": "dropped", "reason": "Bounced Address",
        "sg_event_id": "ZHJvcC0xMDk5NDkxOS1MUnpYbF9OSFN0T0doUTRrb2ZTbV9BLTA",
        "sg_message_id": "LRzXl_NHStOGhQ4kofSm_A.filterdrecv-p3mdw1-756b745b58-kmzbl-18-5F5FC76C-9.0",
        "smtp-id": "<LRzXl_NHStOGhQ4kofSm_A@ismtpd0039p1iad1.sendgrid.net>", "timestamp": 1600112492,
    }], sort_keys=True, separators=(",", ":")).encode() + b"\r\n"
    headers = {sendgrid.SIGNATURE_HEADER: signature, sendgrid.TIMESTAMP_HEADER: "1600112502"}
    at = datetime.fromtimestamp(1600112502, UTC)
    sendgrid.verify(headers, payload, key, at)
    with pytest.raises(Unauthenticated):
        sendgrid.verify(headers, payload[:-2], key, at)  # the trailing CRLF is signed too
    [dropped] = sendgrid.parse(payload).events
    assert (dropped.kind, dropped.provider_message_id) == (Kind.REJECTED, "LRzXl_NHStOGhQ4kofSm_A")


@pytest.mark.parametrize("position", [0, 1, len(BODY) // 2, len(BODY) - 1])
def test_one_byte_changed_in_the_body_is_refused(position: int) -> None:
    forged = bytearray(BODY)
    forged[position] ^= 0x01
    with pytest.raises(Unauthenticated, match="signature"):
        sendgrid.verify(signed(BODY), bytes(forged), PUBLIC, NOW)


def test_another_timestamp_than_the_signed_one_is_refused() -> None:
    headers = signed(BODY)
    headers["X-Twilio-Email-Event-Webhook-Timestamp"] = str(int(TS) + 1)
    with pytest.raises(Unauthenticated, match="signature"):
        sendgrid.verify(headers, BODY, PUBLIC, NOW)


def test_one_byte_changed_in_the_signature_is_refused() -> None:
    headers = signed(BODY)
    raw = bytearray(base64.b64decode(headers["X-Twilio-Email-Event-Webhook-Signature"]))
    raw[-1] ^= 0x01
    headers["X-Twilio-Email-Event-Webhook-Signature"] = base64.b64encode(raw).decode()
    with pytest.raises(Unauthenticated, match="signature"):
        sendgrid.verify(headers, BODY, PUBLIC, NOW)


def test_a_body_signed_with_another_key_is_refused() -> None:
    with pytest.raises(Unauthenticated, match="signature"):
        sendgrid.verify(signed(BODY, key=OTHER), BODY, PUBLIC, NOW)
    sendgrid.verify(signed(BODY, key=OTHER), BODY, shown(OTHER), NOW)


@pytest.mark.parametrize("missing", ["X-Twilio-Email-Event-Webhook-Signature",
                                     "X-Twilio-Email-Event-Webhook-Timestamp"])
def test_a_missing_or_empty_header_is_refused(missing: str) -> None:
    headers = signed(BODY)
    del headers[missing]
    with pytest.raises(Unauthenticated, match="missing header"):
        sendgrid.verify(headers, BODY, PUBLIC, NOW)
    headers[missing] = ""
    with pytest.raises(Unauthenticated, match="missing header"):
        sendgrid.verify(headers, BODY, PUBLIC, NOW)


@pytest.mark.parametrize("offset", [-301, 301, -86_400])
def test_a_timestamp_more_than_5_minutes_from_now_is_refused_though_signed(offset: int) -> None:
    timestamp = str(int(TS) + offset)
    with pytest.raises(Unauthenticated, match="from now"):
        sendgrid.verify(signed(BODY, timestamp), BODY, PUBLIC, NOW)


@pytest.mark.parametrize("offset", [-300, 300])
def test_a_timestamp_5_minutes_from_now_is_accepted(offset: int) -> None:
    sendgrid.verify(signed(BODY, str(int(TS) + offset)), BODY, PUBLIC, NOW)


@pytest.mark.parametrize("timestamp", ["17735e5", "-1773500966", "１７７３５００９６６", " 1773500966",
                                       pytest.param("9" * 400, id="400 digits")])
def test_a_timestamp_that_is_not_plain_digits_is_refused(timestamp: str) -> None:
    with pytest.raises(Unauthenticated, match="not a Unix time"):
        sendgrid.verify(signed(BODY, timestamp), BODY, PUBLIC, NOW)


@pytest.mark.parametrize("signature", ["not base64!", "AAAA", base64.b64encode(b"\x30\x02\x01\x01").decode()])
def test_a_signature_that_is_no_ecdsa_signature_is_refused(signature: str) -> None:
    headers = signed(BODY) | {"X-Twilio-Email-Event-Webhook-Signature": signature}
    with pytest.raises(Unauthenticated):
        sendgrid.verify(headers, BODY, PUBLIC, NOW)


@pytest.mark.parametrize("key", [
    "not a key",
    base64.b64encode(b"garbage").decode(),
    shown(ec.generate_private_key(ec.SECP384R1())),
    base64.b64encode(rsa.generate_private_key(65537, 2048).public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)).decode(),
])
def test_an_unusable_configured_key_is_a_configuration_error_not_a_refusal(key: str) -> None:
    with pytest.raises(ValueError, match="verification key") as info:
        sendgrid.verify(signed(BODY), BODY, key, NOW)
    assert not isinstance(info.value, Unauthenticated)


# ---- parse ---------------------------------------------------------------------------------------

def one(item: dict[str, Any]) -> Any:
    [parsed] = sendgrid.parse(json.dumps([item]).encode()).events
    return parsed


def test_delivered_carries_every_match_key() -> None:
    parsed = one(event("delivered", response="250 OK"))
    assert parsed.provider == "sendgrid" and parsed.kind is Kind.DELIVERED
    assert parsed.provider_event_id == "evt-delivered" and parsed.recipient == "zoe@example.com"
    assert parsed.occurred_at == datetime.fromtimestamp(1773500966, UTC)
    assert parsed.provider_message_id == "W7X8aQ9sTx2n"  # the send's X-Message-Id
    assert parsed.message_id == "<14c5d75ce93.dfd.64b469@ismtpd-555>"
    assert parsed.dedupe_key == "order-42" and parsed.bounce_class is None
    assert parsed.detail["response"] == "250 OK" and parsed.detail["category"] == ["receipts"]


@pytest.mark.parametrize(("name", "fields", "kind", "bounce_class"), [
    ("deferred", {"response": "400 try again later", "attempt": "5"}, Kind.DELAYED, None),
    ("bounce", {"type": "bounce", "status": "5.1.1", "reason": "550 5.1.1 no such user"}, Kind.BOUNCED,
     BounceClass.HARD),
    ("bounce", {"type": "blocked", "status": "4.0.0", "bounce_classification": "Reputation"}, Kind.BOUNCED,
     BounceClass.SOFT),
    ("bounce", {}, Kind.BOUNCED, BounceClass.UNDETERMINED),
    ("bounce", {"type": "expired"}, Kind.BOUNCED, BounceClass.UNDETERMINED),
    ("dropped", {"reason": "Bounced Address", "status": "5.0.0"}, Kind.REJECTED, None),
    ("spamreport", {}, Kind.COMPLAINED, None),
    ("unsubscribe", {}, Kind.UNSUBSCRIBED, None),
    ("group_unsubscribe", {"asm_group_id": 10}, Kind.UNSUBSCRIBED, None),
])
def test_each_mapped_event(name: str, fields: dict[str, Any], kind: Kind, bounce_class: BounceClass | None) -> None:
    parsed = one(event(name, **fields))
    assert (parsed.kind, parsed.bounce_class) == (kind, bounce_class)


@pytest.mark.parametrize("name", ["processed", "open", "click", "group_resubscribe", "account_status_change",
                                  "something_new"])
def test_other_events_give_no_event_but_are_not_refused(name: str) -> None:
    body = json.dumps([{"event": name, "email": "zoe@example.com"}, event("delivered")]).encode()
    assert [e.kind for e in sendgrid.parse(body).events] == [Kind.DELIVERED]


def test_a_batch_gives_one_event_per_mapped_item_in_order() -> None:
    body = json.dumps([event("processed"), event("delivered"), event("open"),
                       event("bounce", type="bounce", email="bob@example.com")]).encode()
    assert [(e.kind, e.recipient) for e in sendgrid.parse(body).events] == [
        (Kind.DELIVERED, "zoe@example.com"), (Kind.BOUNCED, "bob@example.com")]
    assert sendgrid.parse(b"[]").events == ()


def test_match_keys_that_are_missing_are_none() -> None:
    item = event("delivered")
    for name in ("sg_message_id", "smtp-id", "dedupe_key"):
        del item[name]
    parsed = one(item)
    assert (parsed.provider_message_id, parsed.message_id, parsed.dedupe_key) == (None, None, None)
    parsed = one(event("delivered", sg_message_id="NoFilterSuffix", **{"smtp-id": "not-bracketed"}))
    assert (parsed.provider_message_id, parsed.message_id) == ("NoFilterSuffix", None)


@pytest.mark.parametrize("body", [b"", b"not json", b"{\"event\": \"delivered\"}", b"\"delivered\"", b"[1]",
                                  b"[[]]", b"\xff\xfe", b"[" * 100_000 + b"]" * 100_000])
def test_a_body_not_shaped_as_documented_is_malformed(body: bytes) -> None:
    with pytest.raises(Malformed):
        sendgrid.parse(body)


@pytest.mark.parametrize("change", [
    {"event": None}, {"event": 3}, {"sg_event_id": None}, {"sg_event_id": ""}, {"email": None}, {"email": 7},
    {"timestamp": None}, {"timestamp": "1773500966"}, {"timestamp": True}, {"timestamp": 10**20},
])
def test_a_mapped_event_without_its_required_fields_is_malformed(change: dict[str, Any]) -> None:
    item = {k: v for k, v in (event("bounce", type="bounce") | change).items() if v is not None}
    with pytest.raises(Malformed):
        sendgrid.parse(json.dumps([event("delivered"), item]).encode())


def test_every_event_is_refused_only_for_its_own_shape() -> None:
    # An unmapped event needs no sg_event_id; a mapped one does.
    assert sendgrid.parse(json.dumps([{"event": "open"}]).encode()).events == ()


def test_the_tolerance_is_five_minutes() -> None:
    assert TOLERANCE_SECONDS == 300
    stale = NOW + timedelta(seconds=301)
    with pytest.raises(Unauthenticated):
        sendgrid.verify(signed(BODY), BODY, PUBLIC, stale)
