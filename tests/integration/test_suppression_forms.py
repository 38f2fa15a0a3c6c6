"""A suppressed mailbox is held back whatever spelling a row, an event or an operator gives it: the one
normal form is the envelope's (RCPT TO), computed in Python, and every writer stores it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from outbox_mailer.delivery_events.model import BounceClass, Kind, ProviderEvent
from outbox_mailer.delivery_events.suppression import normal_address
from outbox_mailer.receiver.intake import take_in
from outbox_mailer.store import EventStore, Store
from outbox_mailer.store.migrations import load_migrations
from tests.integration.conftest import insert
from tests.smtp_server import SmtpTestServer
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio

SPELLINGS = {  # dedupe key: a spelling of a suppressed mailbox that the composer folds to it
    "fullwidth-e": "zoe@\uff45xample.com",
    "fullwidth-E": "Zoe <zoe@\uff25xample.com>",
    "ideographic-stop": "zoe@example\u3002com",
    "upper-idn": "zoë@EXÄMPLE.com",
    "a-label": "zoë@xn--exmple-cua.com",
}


@pytest.fixture
async def events(db_url: str) -> AsyncIterator[EventStore]:
    s = await EventStore.open(db_url)
    yield s
    await s.close()


async def test_every_spelling_of_a_suppressed_mailbox_fails_before_rcpt_to(
        running: Any, store: SqlStore, events: EventStore, smtp_server: SmtpTestServer) -> None:
    await events.suppress(normal_address("zoe@example.com"), "hard_bounce", "operator", None)
    await events.suppress(normal_address("zoë@exämple.com"), "complaint", "operator", None)
    for key, address in SPELLINGS.items():
        await insert(store, key, to_addresses=[address])
    await insert(store, "bystander", to_addresses=["other@example.com"], cc_addresses=["zoe@\uff45xample.com"])
    rows = await (await running()).final(*SPELLINGS, "bystander")
    assert {k: r["status"] for k, r in rows.items()} == {**{k: "failed" for k in SPELLINGS}, "bystander": "sent"}
    assert all(rows[k]["last_error"].startswith("suppressed: ") for k in SPELLINGS), rows
    assert [m.rcpt_tos for m in smtp_server.messages] == [("other@example.com",)], "no suppressed RCPT TO"


async def test_events_store_the_envelope_form_and_a_bounce_by_mail_matches_its_row_in_any_spelling(
        running: Any, store: SqlStore, events: EventStore, smtp_server: SmtpTestServer) -> None:
    await insert(store, "sent", to_addresses=["zoe@example.com"])
    rows = await (await running()).final("sent")
    message_id = (await store.fetch("SELECT message_id FROM email_deliveries WHERE dedupe_key = 'sent'"))[0]["message_id"]
    dsn = ProviderEvent(provider="smtp", provider_event_id="dsn-1", kind=Kind.BOUNCED, recipient="zoe@\uff45xample.com",
                        occurred_at=None, message_id=message_id, bounce_class=BounceClass.HARD)
    webhook = ProviderEvent(provider="resend", provider_event_id="wh-1", kind=Kind.COMPLAINED,
                            recipient="zoë@EXÄMPLE.com", occurred_at=None, provider_message_id="elsewhere")
    intake = await take_in(events, [dsn, webhook], automatic=True, now=datetime.now(UTC))
    assert (intake.recorded, intake.unmatched) == (2, 1)
    stored = {s["address"]: (s["reason"], s["delivery_id"]) for s in await events.suppressions()}
    assert stored == {"zoe@example.com": ("hard_bounce", rows["sent"]["id"]),
                      "zoë@xn--exmple-cua.com": ("complaint", None)}


async def test_the_upgrade_rewrites_suppressions_into_the_envelope_form(empty_db_url: str) -> None:
    migrations = load_migrations()
    store = await Store.open(empty_db_url)
    conn = await asyncpg.connect(empty_db_url)
    try:
        await store.migrate([m for m in migrations if m.version < 20])
        await conn.execute(
            "INSERT INTO email_suppressions (address, reason, source, created_at) VALUES "
            "('zoe@example.com', 'complaint', 'resend', now() - interval '2 days'), "
            "('zoe@\uff45xample.com', 'manual', 'operator', now() - interval '1 day'), "
            "('zoë@exämple.com', 'hard_bounce', 'smtp', now()), ('bob@example.com', 'manual', 'operator', now())")
        await store.migrate(migrations)
        rows = await conn.fetch("SELECT address, reason, source FROM email_suppressions ORDER BY address")
        assert [tuple(r) for r in rows] == [("bob@example.com", "manual", "operator"),
                                            ("zoe@example.com", "complaint", "resend"),  # the first reason stays
                                            ("zoë@xn--exmple-cua.com", "hard_bounce", "smtp")]
        assert await store.migrate(migrations) == [], "nothing left to do"
    finally:
        await conn.close()
        await store.close()
