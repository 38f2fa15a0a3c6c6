"""Schema 9: events matched to their row through the attempt rows, written once; suppressions at the claim."""

from __future__ import annotations

import dataclasses
import email
import email.policy
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest

from outbox_mailer.delivery import Status
from outbox_mailer.delivery_events.model import BounceClass, Kind, ProviderEvent
from outbox_mailer.store import ClaimSession, EventStore
from tests.integration.conftest import insert
from tests.integration.test_store import insert_rows, write_for
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def event(event_id: str, kind: Kind = Kind.DELIVERED, *, at: datetime = T0, **match: str) -> ProviderEvent:
    return ProviderEvent(provider="resend", provider_event_id=event_id, kind=kind, recipient="a@example.com",
                         occurred_at=at, bounce_class=BounceClass.HARD if kind is Kind.BOUNCED else None,
                         detail={"id": event_id}, **match)


@pytest.fixture
async def events(db_url: str):  # type: ignore[no-untyped-def]
    s = await EventStore.open(db_url)
    yield s
    await s.close()


async def send_one(db_url: str, store: SqlStore, key: str, provider_id: str) -> int:
    """A row sent through the claim session, as the daemon records it: provider id and Message-ID on the attempt."""
    await insert_rows(store, 1, prefix=key)
    session = await ClaimSession.open(db_url)
    try:
        [d] = await session.claim_due(1, "w")
        w = write_for(d, Status.SENT, provider_message_id=provider_id)
        w = dataclasses.replace(w, attempt=dataclasses.replace(w.attempt, message_id=d.message_id))
        assert await session.record_outcomes([w]) == {d.id}
    finally:
        await session.close()
    return d.id


async def row(store: SqlStore, delivery_id: int) -> dict[str, object]:
    [r] = await store.fetch("SELECT message_id, delivery_event, delivery_event_at FROM email_deliveries "
                            "WHERE id = $1", delivery_id)
    return r


async def test_an_event_is_matched_by_provider_id_then_message_id_then_dedupe_key(
        db_url: str, store: SqlStore, events: EventStore) -> None:
    a = await send_one(db_url, store, "a", "prov-a")
    b = await send_one(db_url, store, "b", "prov-b")
    message_id = (await row(store, b))["message_id"]  # the claim wrote it
    assert await events.record(event("e1", provider_message_id="prov-a"), "a@example.com", None) == (a, True)
    assert await events.record(event("e2", message_id=message_id), "a@example.com", None) == (b, True)
    assert await events.record(event("e3", dedupe_key="a1"), "a@example.com", None) == (a, True)
    assert await events.record(event("e4", provider_message_id="nobody", message_id="<x@y>"), "a@example.com", None) == (None, True)
    [unmatched] = await store.fetch("SELECT delivery_id FROM email_delivery_events WHERE provider_event_id = 'e4'")
    assert unmatched["delivery_id"] is None


async def test_a_provider_retry_writes_nothing_twice_and_only_the_latest_event_shows(
        db_url: str, store: SqlStore, events: EventStore) -> None:
    a = await send_one(db_url, store, "a", "prov-a")
    assert await events.record(event("e1", Kind.DELIVERED, at=T0, provider_message_id="prov-a"), "a@example.com", None) == (a, True)
    assert await events.record(event("e1", Kind.DELIVERED, at=T0, provider_message_id="prov-a"), "a@example.com", None) == (a, False)
    # an older event arriving late does not hide the newer one
    await events.record(event("e0", Kind.DELAYED, at=T0 - timedelta(minutes=5), provider_message_id="prov-a"), "a@example.com", None)
    r = await row(store, a)
    assert (r["delivery_event"], r["delivery_event_at"]) == ("delivered", T0)
    await events.record(event("e2", Kind.COMPLAINED, at=T0 + timedelta(hours=1), provider_message_id="prov-a"), "a@example.com", None)
    assert (await row(store, a))["delivery_event"] == "complained"
    # kinds outside delivery_event's vocabulary are kept as events only
    await events.record(event("e3", Kind.UNSUBSCRIBED, at=T0 + timedelta(hours=2), provider_message_id="prov-a"),
                        "a@example.com", None)
    assert (await row(store, a))["delivery_event"] == "complained"
    assert [e["provider_event_id"] for e in await events.events_of("a1")] == ["e0", "e1", "e2", "e3"]
    [n] = await store.fetch("SELECT count(*) AS n FROM email_delivery_events")
    assert n["n"] == 4


async def test_a_new_event_suppresses_once_and_the_next_claim_sees_it(
        db_url: str, store: SqlStore, events: EventStore) -> None:
    a = await send_one(db_url, store, "a", "prov-a")
    await events.record(event("b1", Kind.BOUNCED, provider_message_id="prov-a"), "a@example.com", "hard_bounce")
    [s] = await events.suppressions()
    assert (s["address"], s["reason"], s["source"], s["delivery_id"]) == ("a@example.com", "hard_bounce", "resend", a)
    await store.execute("INSERT INTO email_deliveries (dedupe_key, to_addresses, cc_addresses, subject, text_body) "
                        "VALUES ('next', ARRAY['Ann <A@Example.com>'], ARRAY['c@example.com'], 's', 'b'), "
                        "('forced', ARRAY['a@example.com'], '{}', 's', 'b')")
    await store.execute("UPDATE email_deliveries SET ignore_suppressions = true WHERE dedupe_key = 'forced'")
    session = await ClaimSession.open(db_url)
    try:
        claimed = {d.dedupe_key: d for d in await session.claim_due(10, "w")}
    finally:
        await session.close()
    day = s["created_at"].astimezone(UTC).strftime("%Y-%m-%d")
    assert claimed["next"].suppressed == (f"a@example.com hard_bounce {day}",)
    assert claimed["forced"].suppressed == ()
    assert await events.unsuppress("a@example.com") is True
    assert await events.unsuppress("a@example.com") is False


async def test_an_expired_suppression_no_longer_holds(db_url: str, store: SqlStore, events: EventStore) -> None:
    await events.suppress("a@example.com", "manual", "operator", datetime.now(UTC) - timedelta(seconds=1))
    await insert_rows(store, 1)
    session = await ClaimSession.open(db_url)
    try:
        [d] = await session.claim_due(1, "w")
    finally:
        await session.close()
    assert d.suppressed == ()


async def test_a_single_use_token_is_refused_with_another_body_but_not_on_the_providers_retry(
        events: EventStore) -> None:
    assert await events.remember_token("mailgun", "tok", b"body") is True
    assert await events.remember_token("mailgun", "tok", b"body") is True
    assert await events.remember_token("mailgun", "tok", b"other body") is False


async def test_the_daemon_fails_a_wholly_suppressed_row_unsent_and_leaves_a_suppressed_bcc_out(
        running, store: SqlStore, db_url: str, events: EventStore, smtp_server) -> None:  # type: ignore[no-untyped-def]
    await events.suppress("gone@example.com", "hard_bounce", "operator", None)
    await insert(store, "all-suppressed", to_addresses=["Gone <GONE@example.com>"])
    await insert(store, "one-suppressed", to_addresses=["here@example.com"], bcc_addresses=["gone@example.com"])
    await insert(store, "forced", to_addresses=["gone@example.com"], ignore_suppressions=True)
    r = await running()
    rows = await r.final("all-suppressed", "one-suppressed", "forced")
    failed = rows["all-suppressed"]
    assert failed["status"] == "failed" and failed["last_error"].startswith("suppressed: gone@example.com (hard_bounce")
    assert rows["one-suppressed"]["status"] == "sent" and rows["forced"]["status"] == "sent"
    envelopes = sorted(m.rcpt_tos for m in smtp_server.accepted)
    assert envelopes == [("gone@example.com",), ("here@example.com",)], "the suppressed row reached no server"
    [attempt] = await store.attempts(rows["one-suppressed"]["id"])
    assert "suppressed: hard_bounce" in attempt["refused"]
    sent = await store.fetch("SELECT message_id FROM email_deliveries WHERE dedupe_key = 'one-suppressed'")
    ids = {email.message_from_bytes(m.data, policy=email.policy.default)["Message-ID"] for m in smtp_server.accepted}
    assert sent[0]["message_id"] in ids, "the row keeps the Message-ID it was sent with"


async def test_our_own_bad_mailbox_refusal_is_a_hard_bounce_that_suppresses_and_another_refusal_is_not(
        running, store: SqlStore, events: EventStore, smtp_server) -> None:  # type: ignore[no-untyped-def]
    smtp_server.fail("RCPT", "550 5.1.1 <nobody@example.com>: Recipient address rejected: User unknown",
                     address="nobody@example.com")
    smtp_server.fail("RCPT", "550 5.2.1 <blocked@example.com>: mailbox disabled, not accepting messages",
                     address="blocked@example.com")
    await insert(store, "unknown-user", to_addresses=["Nobody <nobody@example.com>"])
    await insert(store, "partly", to_addresses=["here@example.com"], cc_addresses=["nobody@example.com"])
    await insert(store, "policy", to_addresses=["blocked@example.com"])
    r = await running()
    rows = await r.final("unknown-user", "partly", "policy")
    assert rows["unknown-user"]["status"] == "failed" and rows["partly"]["status"] == "sent"
    with anyio.fail_after(5):  # written right after the outcomes commit, so a moment after they show
        while not (suppressions := await events.suppressions()) or len(await events.events_of("partly")) < 1:
            await anyio.sleep(0.05)
    [s] = suppressions
    assert (s["address"], s["reason"], s["source"]) == ("nobody@example.com", "hard_bounce", "smtp")
    kinds = {key: [(e["kind"], e["bounce_class"], e["recipient"]) for e in await events.events_of(key)]
             for key in ("unknown-user", "partly", "policy")}
    assert kinds == {"unknown-user": [("bounced", "hard", "nobody@example.com")],
                     "partly": [("bounced", "hard", "nobody@example.com")], "policy": []}
    [d] = await store.fetch("SELECT delivery_event FROM email_deliveries WHERE dedupe_key = 'unknown-user'")
    assert d["delivery_event"] == "bounced"


async def test_a_bounce_by_mail_counts_only_for_a_recipient_of_the_row_it_quotes(
        db_url: str, store: SqlStore, events: EventStore) -> None:
    a = await send_one(db_url, store, "a", "prov-a")  # to a@example.com
    message_id = (await row(store, a))["message_id"]
    forged = ProviderEvent(provider="smtp", provider_event_id="dsn-1", kind=Kind.BOUNCED, recipient="victim@example.com",
                           occurred_at=T0, message_id=message_id, bounce_class=BounceClass.HARD)
    assert await events.record(forged, "victim@example.com", "hard_bounce") == (a, True)
    assert await events.suppressions() == [], "a forged bounce quoting a real Message-ID suppresses nobody"
    assert (await row(store, a))["delivery_event"] is None
    real = dataclasses.replace(forged, provider_event_id="dsn-2", recipient="A@Example.com")
    assert await events.record(real, "a@example.com", "hard_bounce") == (a, True)
    assert [s["address"] for s in await events.suppressions()] == ["a@example.com"]
    assert (await row(store, a))["delivery_event"] == "bounced"


async def test_an_ses_event_finds_a_row_relayed_over_smtp_by_the_queue_id_in_the_250_reply(
        running: Any, store: SqlStore, events: EventStore, smtp_server: Any) -> None:
    # SES over SMTP answers "250 Ok <its message id>" and its events carry that id, not our Message-ID
    ses_id = "0100018c3b5a7e2f-2c8e7a1b-9d3f-4c2e-8b1a-5e6f7a8b9c0d-000000"
    smtp_server.fail("DATA", f"250 Ok {ses_id}")
    await insert(store, "via-ses", to_addresses=["gone@example.com"])
    r = await running()
    rows = await r.final("via-ses")
    assert rows["via-ses"]["provider_message_id"] == ses_id
    bounce = ProviderEvent(provider="ses", provider_event_id="sns-9:gone@example.com", kind=Kind.BOUNCED,
                           recipient="gone@example.com", occurred_at=T0, bounce_class=BounceClass.HARD,
                           provider_message_id=ses_id, message_id="<rewritten-by-ses@email.amazonses.com>")
    assert await events.record(bounce, "gone@example.com", "hard_bounce") == (rows["via-ses"]["id"], True)
