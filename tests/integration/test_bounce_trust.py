"""Which bounces may suppress: a DSN proves nothing about the other recipients of a message, a future-dated
event is refused, a planted DSN stores a bounded number of events, and rates count matched events only."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from outbox_mailer.delivery_events.bounce_tags import BounceAddress, BounceTag, Unproven, day_of
from outbox_mailer.delivery_events.dsn import parse_dsn
from outbox_mailer.delivery_events.model import BounceClass, Kind, ProviderEvent
from outbox_mailer.receiver.intake import take_in
from outbox_mailer.store import EventStore
from outbox_mailer.store.console import ConsoleStore
from tests.integration.test_delivery_events import row, send_one
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio

NOW = datetime.now(UTC)
DSN = (Path(__file__).resolve().parents[1] / "fixtures" / "dsn" / "postfix_failed_headers.eml").read_bytes()
ORIGINAL_ID = b"<3f2a9c0d8e7b41a6b5c4d3e2f1a09b8c@shop.example.com>"


@pytest.fixture
async def events(db_url: str) -> AsyncIterator[EventStore]:
    s = await EventStore.open(db_url)
    yield s
    await s.close()


def bounce(event_id: str, recipient: str, message_id: str, *, at: datetime = NOW) -> ProviderEvent:
    return ProviderEvent(provider="smtp", provider_event_id=event_id, kind=Kind.BOUNCED, recipient=recipient,
                         occurred_at=at, message_id=message_id, bounce_class=BounceClass.HARD)


async def test_an_untagged_bounce_about_a_row_with_several_recipients_suppresses_nobody(
        db_url: str, store: SqlStore, events: EventStore) -> None:
    a = await send_one(db_url, store, "a", "prov-a")
    await store.execute("UPDATE email_deliveries SET cc_addresses = ARRAY['Cc <cc@example.com>'], "
                        "bcc_addresses = ARRAY['hidden@example.com'] WHERE id = $1", a)
    message_id = str((await row(store, a))["message_id"])
    # a recipient holds the Message-ID and the Cc list, and guesses the Bcc
    intake = await take_in(events, [bounce("f1", "cc@example.com", message_id),
                                    bounce("f2", "hidden@example.com", message_id),
                                    bounce("f3", "a@example.com", message_id)], automatic=True, now=NOW)
    assert intake.recorded == 3 and intake.unmatched == 0, "kept for an operator, on the row"
    assert await events.suppressions() == [], "a bounce by mail about a shared message suppresses nobody"
    assert (await row(store, a))["delivery_event"] is None


async def test_an_untagged_bounce_about_a_row_with_one_recipient_still_suppresses_it(
        db_url: str, store: SqlStore, events: EventStore) -> None:
    a = await send_one(db_url, store, "a", "prov-a")  # to a@example.com alone
    message_id = str((await row(store, a))["message_id"])
    await take_in(events, [bounce("b1", "A@Example.com", message_id)], automatic=True, now=NOW)
    assert [s["address"] for s in await events.suppressions()] == ["a@example.com"]
    assert (await row(store, a))["delivery_event"] == "bounced"


async def test_an_event_dated_in_the_future_is_refused_and_cannot_pin_the_rows_delivery_event(
        db_url: str, store: SqlStore, events: EventStore) -> None:
    a = await send_one(db_url, store, "a", "prov-a")
    far = ProviderEvent(provider="resend", provider_event_id="e9999", kind=Kind.DELIVERED, recipient="a@example.com",
                        occurred_at=datetime(9999, 1, 1, tzinfo=UTC), provider_message_id="prov-a")
    intake = await take_in(events, [far], automatic=True, now=NOW)
    assert (intake.recorded, intake.refused) == (0, 1)
    assert await events.events_of("a1") == []
    assert (await row(store, a))["delivery_event"] is None
    # a clock a little ahead is not the future
    near = dataclasses.replace(far, provider_event_id="e-near", occurred_at=NOW + timedelta(seconds=30))
    later = dataclasses.replace(far, provider_event_id="e-bounce", kind=Kind.BOUNCED, bounce_class=BounceClass.SOFT,
                                occurred_at=NOW + timedelta(seconds=60))
    intake = await take_in(events, [near, later], automatic=True, now=NOW)
    assert (intake.recorded, intake.refused) == (2, 0)
    assert (await row(store, a))["delivery_event"] == "bounced", "the later event shows: nothing pinned it"


async def test_a_planted_bounce_naming_a_thousand_addresses_stores_a_bounded_number_of_events(
        db_url: str, store: SqlStore, events: EventStore) -> None:
    groups = b"".join(b"\nFinal-Recipient: rfc822; user%d@example.net\nAction: failed\nStatus: 5.1.1\n" % i
                      for i in range(1000))
    raw = DSN.replace(b"\nFinal-Recipient:", groups + b"\nFinal-Recipient:", 1)
    parsed = parse_dsn(raw, NOW)
    assert parsed is not None
    await take_in(events, parsed, automatic=True, now=NOW)
    [n] = await store.fetch("SELECT count(*) AS n FROM email_delivery_events")
    assert n["n"] <= 100


async def test_bounce_rates_count_only_events_matched_to_an_email(
        db_url: str, store: SqlStore, events: EventStore) -> None:
    a = await send_one(db_url, store, "a", "prov-a")
    message_id = str((await row(store, a))["message_id"])
    planted = [bounce(f"u{i}", f"user{i}@example.net", "<nobody@example.org>") for i in range(50)]
    await take_in(events, [*planted, bounce("m1", "a@example.com", message_id),
                           bounce("m2", "a@example.com", message_id)], automatic=True, now=NOW)
    console = await ConsoleStore.open(db_url)
    try:
        rates = await console.event_rates(7 * 86400)
    finally:
        await console.close()
    assert (rates["sent"], rates["bounces"], rates["hard_bounces"]) == (1, 1, 1), \
        "one email sent, one bounced: planted and repeated events do not count"


async def test_a_recipients_tag_proves_that_recipient_alone_and_a_forged_tag_proves_nothing(
        db_url: str, store: SqlStore, events: EventStore) -> None:
    a = await send_one(db_url, store, "a", "prov-a")
    await store.execute("UPDATE email_deliveries SET cc_addresses = ARRAY['Cc <CC@example.com>'] WHERE id = $1", a)
    tags = BounceAddress("bounces@example.com", [b"k" * 32])
    today = day_of(NOW)
    cc_tag = tags.read(tags.sender(a, 2, today), today)  # the row's second listed recipient: cc@example.com
    assert isinstance(cc_tag, BounceTag)
    # the bounce needs no Message-ID: the tag names the row
    await take_in(events, [bounce("t1", "a@example.com", "<unknown@example.org>")], automatic=True, now=NOW,
                  proof=cc_tag)
    assert await events.suppressions() == [], "the tag of cc@ proves nothing about a@"
    intake = await take_in(events, [bounce("t2", "cc@example.com", "<unknown@example.org>")], automatic=True,
                           now=NOW, proof=cc_tag)
    assert intake.unmatched == 0
    assert [s["address"] for s in await events.suppressions()] == ["cc@example.com"]
    assert (await row(store, a))["delivery_event"] == "bounced"
    whole = tags.read(tags.sender(a, 0, today), today)  # every recipient sees the message's own tag
    await take_in(events, [bounce("t3", "a@example.com", "<x@example.org>")], automatic=True, now=NOW, proof=whole)
    assert [s["address"] for s in await events.suppressions()] == ["cc@example.com"]


async def test_a_bounce_with_a_forged_tag_suppresses_not_even_a_single_recipient(
        db_url: str, store: SqlStore, events: EventStore) -> None:
    a = await send_one(db_url, store, "a", "prov-a")  # to a@example.com alone
    message_id = str((await row(store, a))["message_id"])
    await take_in(events, [bounce("b1", "a@example.com", message_id)], automatic=True, now=NOW,
                  proof=Unproven.FORGED)
    assert await events.suppressions() == []
    assert [e["provider_event_id"] for e in await events.events_of("a1")] == ["b1"], "kept for an operator"
