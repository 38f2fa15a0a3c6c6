"""Resend webhooks: Svix signatures (signed here independently, with generated secrets) and event parsing."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from outbox_mailer.delivery import Delivery, MessageFields
from outbox_mailer.delivery_events import resend
from outbox_mailer.delivery_events.model import BounceClass, Kind, Malformed, Unauthenticated
from outbox_mailer.providers.resend import ResendApi

NOW = datetime(2026, 3, 14, 15, 9, 26, tzinfo=UTC)
EMAIL_ID = "56761188-7520-42d8-8898-ff6fc54ce618"


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def svix_signature(secret: str, msg_id: str, timestamp: str, body: bytes) -> str:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    digest = hmac.new(key, msg_id.encode() + b"." + timestamp.encode() + b"." + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signed(secret: str, body: bytes, *, at: datetime = NOW, msg_id: str = "msg_2mEnXPDoLyNzKjYu6qzWfw1pEIe",
           ) -> dict[str, str]:
    timestamp = str(int(at.timestamp()))
    return {"svix-id": msg_id, "svix-timestamp": timestamp,
            "svix-signature": svix_signature(secret, msg_id, timestamp, body)}


def webhook(event_type: str, **data: Any) -> dict[str, Any]:
    """A body in the shape of Resend's documented examples."""
    fields: dict[str, Any] = {
        "created_at": "2026-03-14T15:09:20.894719+00:00", "email_id": EMAIL_ID,
        "from": "Acme <onboarding@resend.dev>", "to": ["delivered@resend.dev"], "subject": "Sending this example",
        "tags": {"category": "confirm_email", "dedupe_key": "order-42"},
    }  # fmt: skip
    fields.update(data)
    return {"type": event_type, "created_at": "2026-03-14T15:09:21.126Z", "data": fields}


def encode(document: Any) -> bytes:
    return json.dumps(document).encode()


BODY = encode(webhook("email.delivered"))


# ---- verify ------------------------------------------------------------------------------------


def test_the_svix_documentation_example_verifies() -> None:
    headers = {"svix-id": "msg_p5jXN8AQM9LWM0D4loKWxJek", "svix-timestamp": "1614265330",
               "svix-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="}
    resend.verify(headers, b'{"test": 2432232314}', "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                  datetime.fromtimestamp(1614265330, UTC))


def test_a_correctly_signed_body_is_accepted() -> None:
    secret = new_secret()
    resend.verify(signed(secret, BODY), BODY, secret, NOW)


def test_a_body_signed_with_another_secret_is_refused() -> None:
    with pytest.raises(Unauthenticated, match="no svix-signature entry matches"):
        resend.verify(signed(new_secret(), BODY), BODY, new_secret(), NOW)


@pytest.mark.parametrize("position", [0, len(BODY) // 2, len(BODY) - 1])
def test_a_body_altered_by_one_byte_is_refused(position: int) -> None:
    secret = new_secret()
    altered = bytearray(BODY)
    altered[position] ^= 0x01
    with pytest.raises(Unauthenticated):
        resend.verify(signed(secret, BODY), bytes(altered), secret, NOW)


def test_a_body_with_one_byte_more_is_refused() -> None:
    secret = new_secret()
    with pytest.raises(Unauthenticated):
        resend.verify(signed(secret, BODY), BODY + b" ", secret, NOW)


@pytest.mark.parametrize("header", ["svix-id", "svix-timestamp", "svix-signature"])
def test_a_missing_header_is_refused(header: str) -> None:
    secret = new_secret()
    headers = signed(secret, BODY)
    del headers[header]
    with pytest.raises(Unauthenticated, match=f"missing {header}"):
        resend.verify(headers, BODY, secret, NOW)
    with pytest.raises(Unauthenticated, match=f"missing {header}"):
        resend.verify({**signed(secret, BODY), header: " "}, BODY, secret, NOW)


def test_the_signature_covers_the_id_and_the_timestamp() -> None:
    secret = new_secret()
    with pytest.raises(Unauthenticated):
        resend.verify({**signed(secret, BODY), "svix-id": "msg_other"}, BODY, secret, NOW)
    with pytest.raises(Unauthenticated):
        resend.verify({**signed(secret, BODY), "svix-timestamp": str(int(NOW.timestamp()) + 1)}, BODY, secret, NOW)


@pytest.mark.parametrize("offset", [-360, 360, -301, 301])
def test_a_timestamp_beyond_five_minutes_is_refused_even_when_signed(offset: int) -> None:
    secret = new_secret()
    headers = signed(secret, BODY, at=NOW + timedelta(seconds=offset))
    with pytest.raises(Unauthenticated, match="from now"):
        resend.verify(headers, BODY, secret, NOW)


@pytest.mark.parametrize("offset", [-300, -299, 0, 299, 300])
def test_a_timestamp_within_five_minutes_is_accepted(offset: int) -> None:
    secret = new_secret()
    resend.verify(signed(secret, BODY, at=NOW + timedelta(seconds=offset)), BODY, secret, NOW)


@pytest.mark.parametrize("timestamp", ["soon", "1614265330.5", "-1614265330", "", "１２３", "9" * 5000])
def test_a_timestamp_that_is_not_whole_seconds_is_refused(timestamp: str) -> None:
    secret = new_secret()
    headers = {**signed(secret, BODY), "svix-timestamp": timestamp}
    with pytest.raises(Unauthenticated):
        resend.verify(headers, BODY, secret, NOW)


@pytest.mark.parametrize("valid_at", [0, 1, 3])
def test_several_signatures_pass_when_one_matches(valid_at: int) -> None:
    secret = new_secret()
    headers = signed(secret, BODY)
    entries = [svix_signature(new_secret(), headers["svix-id"], headers["svix-timestamp"], BODY),
               "v1a,c2lnbmVkIGJ5IGFuIGVkMjU1MTkga2V5", "v1,not base64!"]
    entries.insert(valid_at, headers["svix-signature"])
    resend.verify({**headers, "svix-signature": " ".join(entries)}, BODY, secret, NOW)


def test_several_signatures_fail_when_none_matches() -> None:
    secret = new_secret()
    headers = signed(secret, BODY)
    forged = [svix_signature(new_secret(), headers["svix-id"], headers["svix-timestamp"], BODY) for _ in range(3)]
    with pytest.raises(Unauthenticated):
        resend.verify({**headers, "svix-signature": " ".join(forged)}, BODY, secret, NOW)


@pytest.mark.parametrize("signature", ["v1", "v1,", "garbage", "v2,{sig}", "{sig}", "V1,{sig}", "v1,%%%%"])
def test_malformed_or_unversioned_signature_entries_are_refused_not_raised(signature: str) -> None:
    secret = new_secret()
    headers = signed(secret, BODY)
    bare = headers["svix-signature"].removeprefix("v1,")
    with pytest.raises(Unauthenticated):
        resend.verify({**headers, "svix-signature": signature.format(sig=bare)}, BODY, secret, NOW)


@pytest.mark.parametrize("secret", ["", "whsec_", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_not*base64!",
                                    "sk_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"])
def test_a_secret_that_is_not_whsec_base64_refuses_everything(secret: str) -> None:
    headers = signed("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", BODY)
    with pytest.raises(Unauthenticated, match="secret"):
        resend.verify(headers, BODY, secret, NOW)


def test_an_unpadded_secret_is_read_like_a_padded_one() -> None:
    key = secrets.token_bytes(32)  # 44 base64 characters with one "="
    padded = "whsec_" + base64.b64encode(key).decode()
    resend.verify(signed(padded, BODY), BODY, padded.rstrip("="), NOW)


def test_verification_is_over_bytes_so_a_body_that_is_not_utf8_is_checked_then_refused_by_parse() -> None:
    secret, body = new_secret(), b'{"type": "email.delivered", "data": {"to": ["\xff"]}}'
    resend.verify(signed(secret, body), body, secret, NOW)
    with pytest.raises(Malformed):
        resend.parse(body, "msg_1")


def test_a_naive_now_is_a_programming_error() -> None:
    secret = new_secret()
    with pytest.raises(ValueError, match="timezone-aware"):
        resend.verify(signed(secret, BODY), BODY, secret, NOW.replace(tzinfo=None))


# ---- parse -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("event_type", "kind"), [
    ("email.delivered", Kind.DELIVERED), ("email.delivery_delayed", Kind.DELAYED),
    ("email.complained", Kind.COMPLAINED), ("email.suppressed", Kind.REJECTED), ("email.failed", Kind.REJECTED),
])  # fmt: skip
def test_each_mapped_type_gives_one_event_with_the_row_references(event_type: str, kind: Kind) -> None:
    document = webhook(event_type)
    [event] = resend.parse(encode(document), "msg_abc").events
    assert (event.provider, event.provider_event_id, event.kind) == ("resend", "msg_abc", kind)
    assert event.recipient == "delivered@resend.dev" and event.provider_message_id == EMAIL_ID
    assert event.dedupe_key == "order-42" and event.message_id is None and event.bounce_class is None
    assert event.occurred_at == datetime(2026, 3, 14, 15, 9, 21, 126000, tzinfo=UTC)
    assert event.detail == document


def test_documented_failed_and_suppressed_bodies_keep_their_reason_in_detail() -> None:
    failed = webhook("email.failed", failed={"reason": "reached_daily_quota"})
    suppressed = webhook("email.suppressed", suppressed={"type": "OnAccountSuppressionList", "message": "on the list"})
    assert resend.parse(encode(failed), "m").events[0].detail["data"]["failed"] == {"reason": "reached_daily_quota"}
    assert resend.parse(encode(suppressed), "m").events[0].detail["data"]["suppressed"]["type"] == \
        "OnAccountSuppressionList"


@pytest.mark.parametrize(("bounce", "expected"), [
    ({"type": "Permanent", "subType": "General", "message": "mailbox does not exist"}, BounceClass.HARD),
    ({"type": "Permanent", "subType": "Suppressed"}, BounceClass.HARD),
    ({"type": "Transient", "subType": "MailboxFull"}, BounceClass.SOFT),
    ({"type": "Temporary"}, BounceClass.SOFT),
    ({"type": "Undetermined"}, BounceClass.UNDETERMINED),
    ({"type": 3}, BounceClass.UNDETERMINED),
    ({}, BounceClass.UNDETERMINED),
    (None, BounceClass.UNDETERMINED),
])  # fmt: skip
def test_a_bounce_is_classed_by_its_type(bounce: Any, expected: BounceClass) -> None:
    [event] = resend.parse(encode(webhook("email.bounced", bounce=bounce)), "msg_b").events
    assert (event.kind, event.bounce_class) == (Kind.BOUNCED, expected)


def test_one_event_per_recipient_each_with_its_own_stable_id() -> None:
    body = encode(webhook("email.bounced", to=["a@example.com", "b@example.com", "a@example.com"],
                          bounce={"type": "Permanent"}))
    events = resend.parse(body, "msg_multi").events
    assert [e.recipient for e in events] == ["a@example.com", "b@example.com"]
    assert [e.provider_event_id for e in events] == ["msg_multi:a@example.com", "msg_multi:b@example.com"]
    assert resend.parse(body, "msg_multi").events == events  # a retried webhook gives the same ids


def test_a_body_naming_no_recipient_still_gives_its_event() -> None:
    document = webhook("email.delivered")
    del document["data"]["to"]
    [event] = resend.parse(encode(document), "msg_n").events
    assert event.recipient is None and event.provider_event_id == "msg_n"


@pytest.mark.parametrize(("tags", "key"), [
    ({"dedupe_key": "k-1"}, "k-1"), ([{"name": "dedupe_key", "value": "k-2"}], "k-2"),
    ({"category": "x"}, None), ({"dedupe_key": 42}, None), ({"dedupe_key": ""}, None), (None, None), ("k", None),
])  # fmt: skip
def test_the_dedupe_key_comes_from_the_tag_of_that_name(tags: Any, key: str | None) -> None:
    [event] = resend.parse(encode(webhook("email.delivered", tags=tags)), "m").events
    assert event.dedupe_key == key


def test_the_key_our_transport_tags_a_send_with_is_read_back_from_the_webhook() -> None:
    delivery = Delivery(
        id=1, dedupe_key="order_42-a", claim_token=uuid.UUID(int=1), attempts=1, max_attempts=None,
        from_address=None, to_addresses=("a@example.com",), cc_addresses=(), bcc_addresses=(), reply_to=None,
        subject="s", text_body="t", html_body=None, headers={}, attachments=[], metadata={"order": 42},
        transport=None, priority=0, scheduled_at=NOW, expires_at=None, created_at=NOW,
    )  # fmt: skip
    fields = MessageFields("shop@example.com", ("a@example.com",), (), (), None, "Hi", "t", None, (), ())
    sent = ResendApi("re_key", "http://127.0.0.1:9").build(fields, delivery, "<m@x>", delivery.dedupe_key, NOW).json()
    echoed = {tag["name"]: tag["value"] for tag in sent["tags"]}  # webhooks give tags as an object
    [event] = resend.parse(encode(webhook("email.delivered", tags=echoed)), "m").events
    assert event.dedupe_key == "order_42-a"


@pytest.mark.parametrize("event_type", ["email.sent", "email.opened", "email.clicked", "email.scheduled",
                                        "email.received", "contact.created", "domain.updated",
                                        "suppression.added", "email.something_new"])
def test_other_types_give_no_event(event_type: str) -> None:
    assert resend.parse(encode(webhook(event_type)), "m").events == ()


def test_an_unreadable_created_at_leaves_occurred_at_unknown_and_a_naive_one_is_utc() -> None:
    document = webhook("email.delivered")
    document["created_at"] = "yesterday"
    assert resend.parse(encode(document), "m").events[0].occurred_at is None
    document["created_at"] = "2026-03-14T15:09:21"
    assert resend.parse(encode(document), "m").events[0].occurred_at == datetime(2026, 3, 14, 15, 9, 21, tzinfo=UTC)


@pytest.mark.parametrize("body", [
    b"", b"not json", b"\xff\xfe", b"[]", b'"email.delivered"', b"42", b"null",
    b'{"data": {}}', b'{"type": "", "data": {}}', b'{"type": 7, "data": {}}',
    b'{"type": "email.delivered"}', b'{"type": "email.delivered", "data": []}',
    b'{"type": "email.opened", "data": "x"}',
    b'{"type": "email.delivered", "data": {"to": [1]}}', b'{"type": "email.delivered", "data": {"to": {"a": 1}}}',
    b'{"type": "email.delivered", "data": {"email_id": 5}}',
])  # fmt: skip
def test_a_body_not_of_the_documented_shape_is_malformed(body: bytes) -> None:
    with pytest.raises(Malformed):
        resend.parse(body, "m")
