"""An event that comes before its row's outcome is written (a DSN or a fast webhook while the row is
still 'sending') matches no row then; it keeps the ids it quotes and is matched when the outcome lands."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest

from outbox_mailer.delivery import Status
from outbox_mailer.delivery_events.model import BounceClass, Kind, ProviderEvent
from outbox_mailer.receiver.intake import take_in
from outbox_mailer.store import ClaimSession, EventStore
from tests.integration.conftest import insert
from tests.integration.test_store import insert_rows, write_for
from tests.smtp_server import SmtpTestServer
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio


@pytest.fixture
async def events(db_url: str) -> AsyncIterator[EventStore]:
    s = await EventStore.open(db_url)
    yield s
    await s.close()


def bounce(event_id: str, recipient: str, message_id: str) -> ProviderEvent:
    return ProviderEvent(provider="smtp", provider_event_id=event_id, kind=Kind.BOUNCED, recipient=recipient,
                         occurred_at=None, message_id=message_id, bounce_class=BounceClass.HARD)


async def test_a_hard_bounce_that_comes_while_its_row_is_sending_suppresses_once_the_outcome_lands(
        running: Any, store: SqlStore, events: EventStore, smtp_server: SmtpTestServer) -> None:
    hold = threading.Event()
    smtp_server.script("DATA", hold=hold)  # the server has the message; its answer waits for the bounce
    await insert(store, "early", to_addresses=["Gone <gone@example.com>"])
    r = await running()
    try:
        rows = await r.wait_for(lambda rows: rows["early"]["status"] == "sending" and bool(smtp_server.commands),
                                ["early"])
        message_id = rows["early"]["message_id"]
        intake = await take_in(events, [bounce("dsn-early", "GONE@example.com", message_id),
                                        bounce("dsn-forged", "victim@example.com", message_id)],
                                       automatic=True, now=datetime.now(UTC))
        assert (intake.recorded, intake.unmatched) == (2, 2), "the attempt is not written yet"
        assert await events.suppressions() == []
    finally:
        hold.set()
    rows = await r.final("early")
    assert rows["early"]["status"] == "sent"
    with anyio.fail_after(10):  # matched right after the outcome commits
        while not (matched := await events.events_of("early")) or len(matched) < 2:
            await anyio.sleep(0.05)
    [s] = await events.suppressions()
    assert (s["address"], s["reason"], s["source"], s["delivery_id"]) == (
        "gone@example.com", "hard_bounce", "smtp", rows["early"]["id"]), "the forged one suppresses nobody"
    assert (await store.status(["early"]))[0]["delivery_event"] == "bounced"
    await insert(store, "next", to_addresses=["gone@example.com"])
    after = await r.final("next")
    assert after["next"]["status"] == "failed" and after["next"]["last_error"].startswith("suppressed: ")
    assert [m.rcpt_tos for m in smtp_server.messages] == [("gone@example.com",)], "the next one never went out"


async def test_a_webhook_faster_than_the_outcome_is_matched_by_the_provider_id_when_it_is_written(
        db_url: str, store: SqlStore, events: EventStore) -> None:
    await insert_rows(store, 1, prefix="fast")
    session = await ClaimSession.open(db_url)
    try:
        [d] = await session.claim_due(1, "w")
        delivered = ProviderEvent(provider="resend", provider_event_id="wh-1", kind=Kind.DELIVERED,
                                  recipient=d.to_addresses[0], occurred_at=None, provider_message_id="prov-fast")
        assert await events.record(delivered, None, None) == (None, True)
        w = write_for(d, Status.SENT, provider_message_id="prov-fast")
        w = dataclasses.replace(w, attempt=dataclasses.replace(w.attempt, message_id=d.message_id))
        assert await session.record_outcomes([w]) == {d.id}
        assert await session.adopt_events(True) == 1
        assert await session.adopt_events(True) == 0, "matched once"
    finally:
        await session.close()
    [e] = await events.events_of(d.dedupe_key)
    assert e["provider_event_id"] == "wh-1"
    assert (await store.status([d.dedupe_key]))[0]["delivery_event"] == "delivered"
