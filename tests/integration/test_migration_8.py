"""Schema version 8 on a live table: every status carried over, a claim in flight, then a new daemon drains it."""

from __future__ import annotations

import uuid

import anyio
import asyncpg
import pytest

from outbox_mailer.daemon.service import Daemon
from outbox_mailer.store.migrations import load_migrations
from outbox_mailer.transports.smtp import SmtpTransport
from tests.in_process_daemon import settings_for
from tests.smtp_server import SmtpTestServer
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio

ROWS = """
INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, status, sent_at, scheduled_at,
                              claim_token, claimed_at, claimed_by, attempts, last_error)
VALUES ('due', ARRAY['a@example.com'], 'due', 'b', 'pending', NULL, now(), NULL, NULL, NULL, 0, NULL),
       ('later', ARRAY['a@example.com'], 'later', 'b', 'pending', NULL, now() + interval '1 day', NULL, NULL, NULL,
        0, NULL),
       ('dead-claim', ARRAY['a@example.com'], 'dead-claim', 'b', 'sending', NULL, now(), gen_random_uuid(),
        now() - interval '1 hour', 'gone-host', 1, NULL),
       ('live-claim', ARRAY['a@example.com'], 'live-claim', 'b', 'sending', NULL, now(), $1,
        now(), 'old-daemon', 1, NULL),
       ('sent', ARRAY['a@example.com'], 'sent', 'b', 'sent', now(), now(), NULL, NULL, NULL, 1, NULL),
       ('failed', ARRAY['a@example.com'], 'failed', 'b', 'failed', NULL, now(), NULL, NULL, NULL, 3, '550 no'),
       ('cancelled', ARRAY['a@example.com'], 'cancelled', 'b', 'cancelled', NULL, now(), NULL, NULL, NULL, 0,
        'cancelled by operator'),
       ('in-doubt', ARRAY['a@example.com'], 'in-doubt', 'b', 'in_doubt', NULL, now(), NULL, NULL, NULL, 1, 'timeout')
"""


async def test_upgrade_carries_every_status_and_a_new_daemon_drains_what_was_in_flight(
        empty_db_url: str, smtp_server: SmtpTestServer) -> None:
    migrations = load_migrations()
    store = await SqlStore.open(empty_db_url)
    old_daemon = await asyncpg.connect(empty_db_url)
    try:
        await store.migrate([m for m in migrations if m.version <= 7])
        live_token = uuid.uuid4()
        await store.execute(ROWS, live_token)
        # a daemon of version 7 is sending 'live-claim' right now: it holds the row's advisory lock
        assert await old_daemon.fetchval("SELECT pg_try_advisory_lock(outbox_mailer_lock_key('live-claim'))")
        before = {r["dedupe_key"]: r for r in await store.fetch("SELECT * FROM email_deliveries")}

        # to the newest schema: 8, and what came after it, in one upgrade
        assert [m.version for m in await store.migrate(migrations)] == [m.version for m in migrations
                                                                        if m.version >= 8]

        after = {r["dedupe_key"]: r for r in await store.fetch("SELECT * FROM email_deliveries")}
        assert after.keys() == before.keys()
        for key, row in before.items():
            assert {c: after[key][c] for c in row} == row, f"{key}: a column changed in the upgrade"
        queued = {r["dedupe_key"]: r["claimed"] for r in await store.fetch(
            "SELECT d.dedupe_key, q.claimed_at IS NOT NULL AS claimed FROM email_queue q "
            "JOIN email_deliveries d ON d.id = q.delivery_id")}
        assert queued == {"due": False, "later": False, "dead-claim": True, "live-claim": True}

        settings = settings_for(empty_db_url, smtp_server, rescue_interval_seconds=0.2, rescue_after_seconds=120)
        transport = SmtpTransport(settings.smtp)
        daemon = Daemon(settings, {"smtp": transport})
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            # the old daemon finishes its send and records it with version 7's fenced write, then stops
            await old_daemon.execute(
                "UPDATE email_deliveries SET status = 'sent', sent_at = now(), provider_message_id = 'q1', "
                "claim_token = NULL, updated_at = now() WHERE dedupe_key = 'live-claim' AND status = 'sending' "
                "AND claim_token = $1", live_token)
            await old_daemon.close()
            with anyio.fail_after(15):
                while True:
                    status = {r["dedupe_key"]: r["status"] for r in await store.fetch(
                        "SELECT dedupe_key, status FROM email_deliveries")}
                    if status["due"] == "sent" and status["dead-claim"] == "sent":
                        break
                    await anyio.sleep(0.05)
            daemon.stop()
        await transport.aclose()

        assert status == {"due": "sent", "later": "pending", "dead-claim": "sent", "live-claim": "sent",
                          "sent": "sent", "failed": "failed", "cancelled": "cancelled", "in-doubt": "in_doubt"}
        subjects = smtp_server.received_by_header("Subject", accepted_only=True)
        assert subjects == {"due": 1, "dead-claim": 1}, "the live claim was not sent again; nothing else was sent"
        left = {r["dedupe_key"] for r in await store.fetch(
            "SELECT d.dedupe_key FROM email_queue q JOIN email_deliveries d ON d.id = q.delivery_id")}
        assert left == {"later"}
    finally:
        if not old_daemon.is_closed():
            await old_daemon.close()
        await store.close()
