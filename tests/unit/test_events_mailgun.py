"""Mailgun webhooks: HMAC-SHA256(signing key, timestamp + token) and the event mapping."""

from __future__ import annotations

import hashlib
import hmac
import json
import tracemalloc
from datetime import UTC, datetime
from typing import Any

import pytest

from outbox_mailer.delivery_events import mailgun
from outbox_mailer.delivery_events.model import (
    MAX_UNVERIFIED_BYTES,
    BounceClass,
    Kind,
    Malformed,
    TooLarge,
    Unauthenticated,
)

NOW = datetime(2026, 3, 14, 15, 9, 26, tzinfo=UTC)
TS = str(int(NOW.timestamp()))
KEY = "key-3ax6xnjp29jd6fds4gc373sgvjxteol0"
TOKEN = "a8ce0edb2dd8301dee6c2405235584e45aa91d1e9f979f3de0"


def hex_hmac(key: str, timestamp: str, token: str) -> str:
    """Mailgun's signature, written out here independently of the module under test."""
    return hmac.new(key.encode(), (timestamp + token).encode(), hashlib.sha256).hexdigest()


def event_data(name: str, **fields: Any) -> dict[str, Any]:
    base = {"id": "CPgfbmQMTCKtHW6uIWtuVe", "timestamp": 1773500966.908181, "log-level": "info", "event": name,
            "recipient": "zoe@example.com", "recipient-domain": "example.com", "tags": [],
            "envelope": {"transport": "smtp", "sender": "shop@mg.example.com", "targets": "zoe@example.com"},
            "message": {"headers": {"to": "Zoë <zoe@example.com>", "from": "shop@mg.example.com",
                                    "message-id": "0f3c9a5b6c7d8e9f0a1b2c3d4e5f6a7b@mail.example.com",
                                    "subject": "Your order"}, "attachments": [], "size": 111},
            "user-variables": {"dedupe_key": "order-42"}}
    base.update(fields)
    return base


def body(data: dict[str, Any] | None = None, timestamp: str | int = TS, token: str = TOKEN, key: str = KEY,
         **signature: Any) -> bytes:
    block = {"timestamp": timestamp, "token": token, "signature": hex_hmac(key, str(timestamp), token)} | signature
    return json.dumps({"signature": block, "event-data": data or event_data("delivered")}).encode()


# ---- verify --------------------------------------------------------------------------------------

def test_a_body_signed_with_the_key_is_accepted() -> None:
    mailgun.verify(body(), KEY, NOW)
    mailgun.verify(body(timestamp=int(TS)), KEY, NOW)  # the timestamp as a JSON number
    mailgun.verify(body(signature=hex_hmac(KEY, TS, TOKEN).upper()), KEY, NOW)  # hex is hex


def test_the_signature_covers_the_timestamp_and_token_not_the_event() -> None:
    # Mailgun signs timestamp + token only; the event is bound by the receiver refusing a reused token.
    signed = json.loads(body())
    signed["event-data"]["event"] = "complained"
    mailgun.verify(json.dumps(signed).encode(), KEY, NOW)
    assert mailgun.parse(json.dumps(signed).encode()).replay_token == TOKEN


@pytest.mark.parametrize("field", ["token", "timestamp", "signature"])
def test_one_character_changed_in_the_signature_block_is_refused(field: str) -> None:
    document = json.loads(body())
    value = document["signature"][field]
    document["signature"][field] = value[:-1] + ("1" if value[-1] != "1" else "2")
    with pytest.raises(Unauthenticated, match="signature"):
        mailgun.verify(json.dumps(document).encode(), KEY, NOW)


def test_a_signature_made_with_another_key_is_refused() -> None:
    with pytest.raises(Unauthenticated, match="does not match"):
        mailgun.verify(body(key="key-other"), KEY, NOW)


def test_a_subaccounts_parent_signature_authenticates_under_the_parent_key() -> None:
    parent = "key-parent-account"
    signed = body(key="key-subaccount", **{"parent-signature": hex_hmac(parent, TS, TOKEN)})
    mailgun.verify(signed, parent, NOW)
    mailgun.verify(signed, "key-subaccount", NOW)
    with pytest.raises(Unauthenticated):
        mailgun.verify(signed, KEY, NOW)


@pytest.mark.parametrize("field", ["token", "timestamp", "signature"])
def test_a_missing_or_empty_field_is_refused(field: str) -> None:
    document = json.loads(body())
    del document["signature"][field]
    with pytest.raises(Unauthenticated):
        mailgun.verify(json.dumps(document).encode(), KEY, NOW)
    document["signature"][field] = ""
    with pytest.raises(Unauthenticated):
        mailgun.verify(json.dumps(document).encode(), KEY, NOW)


@pytest.mark.parametrize("raw", [b"", b"not json", b"[]", b"{\"event-data\": {}}", b"{\"signature\": \"x\"}",
                                 b"\xff"])
def test_a_body_without_a_signature_object_is_refused(raw: bytes) -> None:
    with pytest.raises(Unauthenticated):
        mailgun.verify(raw, KEY, NOW)


@pytest.mark.parametrize("offset", [-301, 301, -86_400])
def test_a_timestamp_more_than_5_minutes_from_now_is_refused_though_signed(offset: int) -> None:
    with pytest.raises(Unauthenticated, match="from now"):
        mailgun.verify(body(timestamp=str(int(TS) + offset)), KEY, NOW)


@pytest.mark.parametrize("offset", [-300, 300])
def test_a_timestamp_5_minutes_from_now_is_accepted(offset: int) -> None:
    mailgun.verify(body(timestamp=str(int(TS) + offset)), KEY, NOW)


@pytest.mark.parametrize("timestamp", ["1773500966.5", "-1773500966", "soon", True, pytest.param("9" * 400, id="400 digits"), pytest.param(10 ** 400, id="int of 400 digits")])
def test_a_timestamp_that_is_not_a_unix_time_is_refused(timestamp: Any) -> None:
    with pytest.raises(Unauthenticated, match="timestamp"):
        mailgun.verify(body(timestamp=timestamp), KEY, NOW)


@pytest.mark.parametrize("signature", [7, None, "é" * 64, "00" * 32])
def test_a_signature_that_is_no_matching_hex_is_refused(signature: Any) -> None:
    with pytest.raises(Unauthenticated, match="does not match"):
        mailgun.verify(body(signature=signature), KEY, NOW)


def test_an_empty_signing_key_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="signing key") as info:
        mailgun.verify(body(key=""), "", NOW)
    assert not isinstance(info.value, Unauthenticated)


# ---- parse ---------------------------------------------------------------------------------------

def one(data: dict[str, Any]) -> Any:
    received = mailgun.parse(body(data))
    assert received.replay_token == TOKEN and received.confirm_url is None
    [parsed] = received.events
    return parsed


def test_delivered_carries_every_match_key() -> None:
    parsed = one(event_data("delivered", **{"delivery-status": {"code": 250, "message": "OK"}}))
    assert parsed.provider == "mailgun" and parsed.kind is Kind.DELIVERED and parsed.bounce_class is None
    assert parsed.provider_event_id == "CPgfbmQMTCKtHW6uIWtuVe" and parsed.recipient == "zoe@example.com"
    assert parsed.occurred_at == datetime.fromtimestamp(1773500966.908181, UTC)
    assert parsed.provider_message_id == "<0f3c9a5b6c7d8e9f0a1b2c3d4e5f6a7b@mail.example.com>"
    assert parsed.message_id == parsed.provider_message_id  # Mailgun gives it without the brackets
    assert parsed.dedupe_key == "order-42"
    assert parsed.detail["delivery-status"] == {"code": 250, "message": "OK"}


@pytest.mark.parametrize(("fields", "kind", "bounce_class"), [
    ({"severity": "temporary", "reason": "generic", "delivery-status": {"code": 452, "retry-seconds": 600}},
     Kind.DELAYED, None),
    ({"severity": "temporary", "reason": "greylisted"}, Kind.DELAYED, None),
    ({"severity": "permanent", "reason": "bounce", "delivery-status": {"code": 550, "message": "5.1.1 no such user"}},
     Kind.BOUNCED, BounceClass.HARD),
    ({"severity": "permanent"}, Kind.BOUNCED, BounceClass.HARD),
    ({"severity": "permanent", "reason": "old", "delivery-status": {"code": 452}}, Kind.BOUNCED, BounceClass.SOFT),
    ({"severity": "permanent", "reason": "espblock"}, Kind.BOUNCED, BounceClass.UNDETERMINED),
    ({"severity": "permanent", "reason": "generic"}, Kind.BOUNCED, BounceClass.UNDETERMINED),
    ({"severity": "permanent", "reason": "suppress-bounce",
      "delivery-status": {"code": 605, "description": "Not delivering to previously bounced address"}},
     Kind.REJECTED, None),
    ({"severity": "permanent", "reason": "suppress-complaint"}, Kind.REJECTED, None),
    ({"severity": "permanent", "reason": "suppress-unsubscribe"}, Kind.REJECTED, None),
])
def test_failed_events_by_severity_and_reason(fields: dict[str, Any], kind: Kind,
                                              bounce_class: BounceClass | None) -> None:
    parsed = one(event_data("failed", **fields))
    assert (parsed.kind, parsed.bounce_class) == (kind, bounce_class)


@pytest.mark.parametrize(("name", "kind"), [("rejected", Kind.REJECTED), ("complained", Kind.COMPLAINED),
                                            ("unsubscribed", Kind.UNSUBSCRIBED)])
def test_each_other_mapped_event(name: str, kind: Kind) -> None:
    parsed = one(event_data(name))
    assert (parsed.kind, parsed.bounce_class) == (kind, None)


def test_a_rejected_send_may_name_no_recipient() -> None:
    data = event_data("rejected", reject={"reason": "Sandbox subdomains are for test purposes only"})
    del data["recipient"]
    assert one(data).recipient is None


@pytest.mark.parametrize("name", ["accepted", "opened", "clicked", "stored", "list_member_uploaded", "future"])
def test_other_events_give_no_event_but_keep_the_replay_token(name: str) -> None:
    received = mailgun.parse(body({"event": name}))
    assert received.events == () and received.replay_token == TOKEN


def test_match_keys_that_are_missing_are_none() -> None:
    data = event_data("delivered")
    del data["message"], data["user-variables"]
    parsed = one(data)
    assert (parsed.provider_message_id, parsed.message_id, parsed.dedupe_key) == (None, None, None)
    data = event_data("delivered", message={"headers": {"message-id": "<already@bracketed>"}},
                      **{"user-variables": {"dedupe_key": 42}})
    parsed = one(data)
    assert (parsed.message_id, parsed.dedupe_key) == ("<already@bracketed>", None)


def test_a_string_timestamp_is_read_as_unix_seconds() -> None:
    assert one(event_data("delivered", timestamp="1773500966.5")).occurred_at == datetime.fromtimestamp(
        1773500966.5, UTC)


@pytest.mark.parametrize("raw", [b"", b"not json", b"[]", b"\xff",
                                 json.dumps({"event-data": event_data("delivered")}).encode(),
                                 json.dumps({"signature": {"token": TOKEN}}).encode(),
                                 json.dumps({"signature": {"token": TOKEN}, "event-data": []}).encode()])
def test_a_body_not_shaped_as_documented_is_malformed(raw: bytes) -> None:
    with pytest.raises(Malformed):
        mailgun.parse(raw)


@pytest.mark.parametrize("change", [
    {"event": None}, {"event": 5}, {"id": None}, {"id": ""}, {"timestamp": "soon"}, {"timestamp": True},
    {"timestamp": [1]}, {"recipient": 7},
    {"event": "failed", "severity": None}, {"event": "failed", "severity": "fatal"},
])
def test_a_mapped_event_without_its_required_fields_is_malformed(change: dict[str, Any]) -> None:
    data = {k: v for k, v in (event_data("delivered") | change).items() if v is not None}
    with pytest.raises(Malformed):
        mailgun.parse(body(data))


# ---- what parsing before the check may cost -----------------------------------------------------

def peak_bytes_of(check: Any) -> tuple[int, BaseException | None]:
    """The most memory Python allocated while ``check()`` ran, and what it raised."""
    tracemalloc.start()
    try:
        check()
        raised = None
    except Exception as exc:  # the caller asserts on it
        raised = exc
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak, raised


def test_a_signed_body_of_many_small_values_is_refused_before_it_is_parsed() -> None:
    document = json.loads(body())
    document["padding"] = [[]] * 300_000  # ~900 KB of "[]," costs ~20 MB once parsed
    hostile = json.dumps(document, separators=(",", ":")).encode()
    assert len(hostile) < MAX_UNVERIFIED_BYTES
    peak, raised = peak_bytes_of(lambda: mailgun.verify(hostile, KEY, NOW))
    assert isinstance(raised, Unauthenticated) and peak < 3 * len(hostile)


def test_a_body_over_the_unverified_limit_is_refused_unparsed() -> None:
    document = json.loads(body())
    document["padding"] = "x" * MAX_UNVERIFIED_BYTES
    with pytest.raises(TooLarge):
        mailgun.verify(json.dumps(document).encode(), KEY, NOW)
