"""Postmark webhooks: HTTP Basic credentials and record parsing (bodies in the shapes Postmark documents)."""

from __future__ import annotations

import base64
import json
import secrets
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from outbox_mailer.delivery import Delivery, MessageFields
from outbox_mailer.delivery_events import postmark
from outbox_mailer.delivery_events.model import BounceClass, Kind, Malformed, Unauthenticated
from outbox_mailer.providers.postmark import PostmarkApi

USER = "postmark-hooks"
MESSAGE_ID = "883953f4-6105-42a2-a16a-77a8eac79483"


def basic(user: str, password: str, scheme: str = "Basic") -> dict[str, str]:
    return {"authorization": f"{scheme} " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.fixture
def password() -> str:
    return secrets.token_urlsafe(24)


def encode(document: Any) -> bytes:
    return json.dumps(document).encode()


def delivery_record(**fields: Any) -> dict[str, Any]:
    record = {"RecordType": "Delivery", "ServerID": 23, "MessageStream": "outbound", "MessageID": MESSAGE_ID,
              "Recipient": "john@example.com", "Tag": "welcome-email", "DeliveredAt": "2026-03-14T15:09:26Z",
              "Details": "Test delivery webhook details", "Metadata": {"dedupe_key": "order-42", "a_key": "a_value"}}
    record.update(fields)
    return record


def bounce_record(record_type: str = "Bounce", **fields: Any) -> dict[str, Any]:
    record = {"RecordType": record_type, "ID": 4323372036854775807, "Type": "HardBounce", "TypeCode": 1,
              "Name": "Hard bounce", "Tag": "Test", "MessageID": MESSAGE_ID, "ServerID": 1234,
              "MessageStream": "outbound", "Description": "The server was unable to deliver your message.",
              "Details": "Test bounce details", "Email": "john@example.com", "From": "sender@example.com",
              "BouncedAt": "2014-08-01T13:28:10.2735393-04:00", "DumpAvailable": True, "Inactive": True,
              "CanActivate": True, "Subject": "Test subject", "Content": "", "Metadata": {"dedupe_key": "order-42"}}
    record.update(fields)
    return record


def subscription_record(**fields: Any) -> dict[str, Any]:
    record = {"RecordType": "SubscriptionChange", "MessageID": MESSAGE_ID, "ServerID": 123456,
              "MessageStream": "outbound", "ChangedAt": "2020-02-01T10:53:34.416071Z",
              "Recipient": "bounced-address@example.com", "Origin": "Recipient", "SuppressSending": True,
              "SuppressionReason": "HardBounce", "Tag": "my-tag", "Metadata": {"dedupe_key": "order-42"}}
    record.update(fields)
    return record


def one(record: dict[str, Any]) -> Any:
    [event] = postmark.parse(encode(record)).events
    return event


# ---- verify ------------------------------------------------------------------------------------


def test_the_configured_credentials_are_accepted(password: str) -> None:
    postmark.verify(basic(USER, password), b"{}", USER, password)
    postmark.verify(basic(USER, password, scheme="basic"), b"{}", USER, password)  # the scheme is case-insensitive


def test_a_wrong_password_is_refused(password: str) -> None:
    with pytest.raises(Unauthenticated, match="wrong"):
        postmark.verify(basic(USER, password + "x"), b"{}", USER, password)
    with pytest.raises(Unauthenticated, match="wrong"):
        postmark.verify(basic(USER, password[:-1]), b"{}", USER, password)


def test_a_wrong_user_is_refused(password: str) -> None:
    with pytest.raises(Unauthenticated, match="wrong"):
        postmark.verify(basic("someone-else", password), b"{}", USER, password)
    with pytest.raises(Unauthenticated, match="wrong"):
        postmark.verify(basic("", password), b"{}", USER, password)


def test_a_missing_or_empty_authorization_header_is_refused(password: str) -> None:
    for headers in ({}, {"authorization": ""}, {"authorization": "   "}):
        with pytest.raises(Unauthenticated, match="missing"):
            postmark.verify(headers, b"{}", USER, password)


@pytest.mark.parametrize("scheme", ["Bearer", "Digest", "Token", "Basicx"])
def test_a_scheme_other_than_basic_is_refused(scheme: str, password: str) -> None:
    with pytest.raises(Unauthenticated, match="not Basic"):
        postmark.verify(basic(USER, password, scheme=scheme), b"{}", USER, password)


@pytest.mark.parametrize("value", ["Basic", "Basic ", "Basic !!!not-base64!!!",
                                   "Basic " + base64.b64encode(b"no-colon-here").decode()])
def test_malformed_basic_credentials_are_refused(value: str, password: str) -> None:
    with pytest.raises(Unauthenticated):
        postmark.verify({"authorization": value}, b"{}", USER, password)


def test_the_password_may_hold_colons_and_any_unicode() -> None:
    password = "pa:ss:wörd-✓"
    postmark.verify(basic(USER, password), b"{}", USER, password)
    with pytest.raises(Unauthenticated):
        postmark.verify(basic(USER, "pa:ss:word-✓"), b"{}", USER, password)


def test_credentials_that_are_not_utf8_are_refused_not_raised(password: str) -> None:
    header = {"authorization": "Basic " + base64.b64encode(b"\xff\xfe:" + password.encode()).decode()}
    with pytest.raises(Unauthenticated):
        postmark.verify(header, b"{}", USER, password)


@pytest.mark.parametrize(("user", "secret"), [("", "pw"), ("user", ""), ("", "")])
def test_no_configured_credentials_refuse_everything_even_empty_ones(user: str, secret: str) -> None:
    with pytest.raises(Unauthenticated, match="no Postmark webhook credentials"):
        postmark.verify(basic(user, secret), b"{}", user, secret)


# ---- parse -------------------------------------------------------------------------------------


def test_a_delivery_is_delivered_with_the_row_references() -> None:
    record = delivery_record()
    event = one(record)
    assert (event.provider, event.kind, event.recipient) == ("postmark", Kind.DELIVERED, "john@example.com")
    assert event.provider_message_id == MESSAGE_ID and event.dedupe_key == "order-42"
    assert event.occurred_at == datetime(2026, 3, 14, 15, 9, 26, tzinfo=UTC)
    assert event.bounce_class is None and event.message_id is None and event.detail == record
    assert event.provider_event_id.startswith("Delivery:")


@pytest.mark.parametrize(("bounce_type", "expected"), [
    ("HardBounce", BounceClass.HARD), ("BadEmailAddress", BounceClass.HARD),
    ("SoftBounce", BounceClass.SOFT), ("Transient", BounceClass.SOFT), ("DnsError", BounceClass.SOFT),
    ("SpamNotification", BounceClass.UNDETERMINED), ("Blocked", BounceClass.UNDETERMINED),
    ("DMARCPolicy", BounceClass.UNDETERMINED), ("AutoResponder", BounceClass.UNDETERMINED),
    ("Unknown", BounceClass.UNDETERMINED), ("SomethingNew", BounceClass.UNDETERMINED),
])  # fmt: skip
def test_a_bounce_is_classed_by_its_type(bounce_type: str, expected: BounceClass) -> None:
    event = one(bounce_record(Type=bounce_type))
    assert (event.kind, event.bounce_class) == (Kind.BOUNCED, expected)
    assert event.recipient == "john@example.com" and event.provider_message_id == MESSAGE_ID
    assert event.provider_event_id == "Bounce:4323372036854775807" and event.dedupe_key == "order-42"
    assert event.occurred_at == datetime(2014, 8, 1, 13, 28, 10, 273539, tzinfo=timezone(timedelta(hours=-4)))


def test_a_bounce_giving_only_its_type_code_is_classed_by_the_code() -> None:
    record = bounce_record(TypeCode=4096)
    del record["Type"]
    assert one(record).bounce_class is BounceClass.SOFT
    record["TypeCode"] = 100000
    assert one(record).bounce_class is BounceClass.HARD
    record["TypeCode"] = 999
    assert one(record).bounce_class is BounceClass.UNDETERMINED


@pytest.mark.parametrize("bounce_type", ["ManuallyDeactivated", "SMTPApiError", "TemplateRenderingFailed"])
def test_a_bounce_record_of_a_send_postmark_refused_is_rejected(bounce_type: str) -> None:
    event = one(bounce_record(Type=bounce_type))
    assert (event.kind, event.bounce_class) == (Kind.REJECTED, None)


def test_a_spam_complaint_is_complained() -> None:
    event = one(bounce_record("SpamComplaint", Type="SpamComplaint", TypeCode=100001, ID=42))
    assert (event.kind, event.bounce_class, event.provider_event_id) == (Kind.COMPLAINED, None, "SpamComplaint:42")
    assert event.recipient == "john@example.com" and event.dedupe_key == "order-42"
    assert one(bounce_record(Type="SpamComplaint")).kind is Kind.COMPLAINED  # the same told as a Bounce record


def test_an_unsubscribe_through_postmarks_link_is_unsubscribed() -> None:
    event = one(subscription_record(SuppressionReason="ManualSuppression", Origin="Recipient"))
    assert (event.kind, event.recipient) == (Kind.UNSUBSCRIBED, "bounced-address@example.com")
    assert event.provider_message_id == MESSAGE_ID and event.dedupe_key == "order-42"
    assert event.occurred_at == datetime(2020, 2, 1, 10, 53, 34, 416071, tzinfo=UTC)


@pytest.mark.parametrize(("reason", "origin"), [("HardBounce", "Recipient"), ("SpamComplaint", "Recipient"),
                                                ("ManualSuppression", "Customer"), ("ManualSuppression", "Admin")])
def test_any_other_suppression_is_rejected(reason: str, origin: str) -> None:
    event = one(subscription_record(SuppressionReason=reason, Origin=origin, MessageID=None))
    assert (event.kind, event.provider_message_id, event.bounce_class) == (Kind.REJECTED, None, None)


def test_a_reactivation_gives_no_event() -> None:
    record = subscription_record(SuppressSending=False, SuppressionReason=None, Tag=None, Metadata={})
    assert postmark.parse(encode(record)).events == ()


@pytest.mark.parametrize("record_type", ["Open", "Click", "Inbound", "SomethingNew"])
def test_opens_clicks_and_unknown_records_give_no_event(record_type: str) -> None:
    record = {"RecordType": record_type, "MessageID": MESSAGE_ID, "Recipient": "john@example.com",
              "ReceivedAt": "2026-03-14T15:09:26Z", "FirstOpen": True, "Metadata": {}}
    assert postmark.parse(encode(record)).events == ()


def test_records_without_an_id_get_a_stable_digest_that_tells_them_apart() -> None:
    first = one(delivery_record()).provider_event_id
    assert one(delivery_record()).provider_event_id == first  # the same webhook retried
    assert one(delivery_record(Details="other wording", Tag="x")).provider_event_id == first
    assert one(delivery_record(Recipient="jane@example.com")).provider_event_id != first
    assert one(delivery_record(DeliveredAt="2026-03-14T15:09:27Z")).provider_event_id != first
    assert one(delivery_record(MessageID="another-id")).provider_event_id != first
    changed = one(subscription_record()).provider_event_id
    assert changed.startswith("SubscriptionChange:") and changed != first
    record = bounce_record()
    del record["ID"]
    assert one(record).provider_event_id.startswith("Bounce:") and one(record).provider_event_id != "Bounce:None"


@pytest.mark.parametrize(("metadata", "key"), [({"dedupe_key": "k"}, "k"), ({}, None), (None, None),
                                               ({"dedupe_key": 5}, None), ({"Dedupe_Key": "k"}, None), ("k", None)])
def test_the_dedupe_key_comes_from_metadata(metadata: Any, key: str | None) -> None:
    assert one(delivery_record(Metadata=metadata)).dedupe_key == key


def test_the_key_our_transport_sends_in_metadata_is_read_back_from_the_webhook() -> None:
    now = datetime(2026, 3, 14, tzinfo=UTC)
    delivery = Delivery(
        id=1, dedupe_key="invoice 2026/03 #7", claim_token=uuid.UUID(int=1), attempts=1, max_attempts=None,
        from_address=None, to_addresses=("a@example.com",), cc_addresses=(), bcc_addresses=(), reply_to=None,
        subject="s", text_body="t", html_body=None, headers={}, attachments=[], metadata={"order": 42},
        transport=None, priority=0, scheduled_at=now, expires_at=None, created_at=now,
    )  # fmt: skip
    fields = MessageFields("shop@example.com", ("a@example.com",), (), (), None, "Hi", "t", None, (), ())
    sent = PostmarkApi("token", "http://127.0.0.1:9").build(fields, delivery, "<m@x>", delivery.dedupe_key, now).json()
    assert one(delivery_record(Metadata=sent["Metadata"])).dedupe_key == "invoice 2026/03 #7"


def test_an_unreadable_timestamp_leaves_occurred_at_unknown() -> None:
    assert one(delivery_record(DeliveredAt="last tuesday")).occurred_at is None
    assert one(delivery_record(DeliveredAt=None)).occurred_at is None


@pytest.mark.parametrize("body", [
    b"", b"not json", b"\xff\xfe", b"[]", b'[{"RecordType": "Delivery"}]', b'"Delivery"', b"null",
    b"{}", b'{"RecordType": ""}', b'{"RecordType": 1}',
    encode(delivery_record(Recipient=["john@example.com"])), encode(delivery_record(MessageID=7)),
    encode(bounce_record(Email={"address": "x"})), encode(bounce_record(ID=[1])),
    encode(subscription_record(SuppressSending="true")), encode(subscription_record(SuppressSending=None)),
])  # fmt: skip
def test_a_body_not_of_the_documented_shape_is_malformed(body: bytes) -> None:
    with pytest.raises(Malformed):
        postmark.parse(body)
