"""Least-privilege roles and retention, against a real PostgreSQL."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import anyio
import asyncpg
import pytest

from outbox_mailer.daemon.retention import PruneResult, prune
from outbox_mailer.delivery_events.model import BounceClass, Kind, ProviderEvent
from outbox_mailer.settings.config import PruneSettings
from outbox_mailer.store import ClaimSession, EventStore, Store
from outbox_mailer.store.grants import grant_statements
from tests.conftest import psql
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio


def as_user(url: str, user: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{user}@{parts.hostname}:{parts.port}"))


@pytest.fixture
def roles(db_url: str) -> Iterator[tuple[str, str]]:
    app, daemon = f"app_{uuid.uuid4().hex[:8]}", f"mailer_{uuid.uuid4().hex[:8]}"
    psql(db_url, f"CREATE ROLE {app} LOGIN; CREATE ROLE {daemon} LOGIN")
    yield app, daemon
    psql(db_url, f"DROP OWNED BY {app}, {daemon}; DROP ROLE {app}; DROP ROLE {daemon}")


INSERT = ("INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body) "
          "VALUES ($1, ARRAY['a@example.com'], 's', 'b') ON CONFLICT (dedupe_key) DO NOTHING")


async def test_app_role_inserts_and_reads_but_cannot_change_a_row(db_url: str, roles: tuple[str, str]) -> None:
    app, daemon = roles
    store = await SqlStore.open(db_url)
    await store.run_script(grant_statements(app, daemon))
    await store.close()
    conn = await asyncpg.connect(as_user(db_url, app))
    try:
        await conn.execute(INSERT, "k1")
        await conn.execute(INSERT, "k1")  # idempotent enqueue works with INSERT privilege alone
        assert await conn.fetchval("SELECT status FROM email_deliveries WHERE dedupe_key = 'k1'") == "pending"
        for statement in (
            "UPDATE email_deliveries SET status = 'cancelled' WHERE dedupe_key = 'k1'",
            "DELETE FROM email_deliveries WHERE dedupe_key = 'k1'",
            "INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, status, sent_at) "
            "VALUES ('forged', ARRAY['a@example.com'], 's', 'b', 'sent', now())",
        ):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(statement)
    finally:
        await conn.close()


async def test_daemon_role_can_claim_and_record(db_url: str, roles: tuple[str, str]) -> None:
    app, daemon = roles
    store = await SqlStore.open(db_url)
    await store.run_script(grant_statements(app, daemon))
    await store.execute(INSERT, "k1")
    await store.close()
    session = await ClaimSession.open(as_user(db_url, daemon))
    try:
        [delivery] = await session.claim_due(10, "w")
        assert delivery.dedupe_key == "k1"
    finally:
        await session.close()


async def test_the_daemon_role_records_events_suppresses_and_batches_and_the_app_may_ignore_suppressions(
        db_url: str, roles: tuple[str, str]) -> None:
    app, daemon = roles
    store = await SqlStore.open(db_url)
    await store.run_script(grant_statements(app, daemon))
    await store.close()
    app_store = await SqlStore.open(as_user(db_url, app))
    try:
        await app_store.execute("INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, "
                                "ignore_suppressions) VALUES ('k1', ARRAY['a@example.com'], 's', 'b', true)")
        await app_store.fetch("SELECT kind FROM email_delivery_events")
    finally:
        await app_store.close()
    events = await EventStore.open(as_user(db_url, daemon))
    session = await ClaimSession.open(as_user(db_url, daemon))
    try:
        await events.suppress("b@example.com", "manual", "operator", None)
        assert await events.remember_token("mailgun", "t", b"body")
        event = ProviderEvent("resend", "e1", Kind.BOUNCED, "a@example.com", None, dedupe_key="k1",
                              bounce_class=BounceClass.HARD)
        assert (await events.record(event, "a@example.com", "hard_bounce"))[1] is True
        [delivery] = await session.claim_due(10, "w")
        assert await session.open_batch("resend", "batch-key", [delivery]) is not None
    finally:
        await session.close()
        await events.close()


def test_grant_refuses_unsafe_role_names() -> None:
    from outbox_mailer.errors import ConfigurationError

    with pytest.raises(ConfigurationError):
        grant_statements('x"; DROP TABLE email_deliveries; --', "mailer")


async def aged_rows(store: Store, prefix: str, n: int, status: str, age: str) -> None:
    """``n`` final rows created and last changed ``age`` ago, inserted with those times (an UPDATE of
    created_at afterwards would fire the content recheck of schema 12 on every row)."""
    sent_at = "now()" if status == "sent" else "NULL"
    await store.execute(
        "INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, html_body, attachments, "
        f"headers, status, sent_at, created_at, updated_at) SELECT $1 || g, ARRAY['a@example.com'], 's', "
        f"""'secret body', '<p>x</p>', '[{{"filename": "a.txt", "content_type": "text/plain", """
        f""""content_base64": "eA=="}}]', '{{"X-A": "1"}}', '{status}', {sent_at}, """
        f"now() - interval '{age}', now() - interval '{age}' FROM generate_series(1, $2) g",
        prefix, n,
    )


async def test_prune_scrubs_then_deletes_only_old_final_rows(db_url: str) -> None:
    store = await SqlStore.open(db_url)
    try:
        await aged_rows(store, "recent", 3, "sent", "1 day")
        await aged_rows(store, "month", 4, "failed", "40 days")
        await aged_rows(store, "ancient", 5, "sent", "400 days")
        await store.execute("INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body) "
                            "VALUES ('waiting', ARRAY['a@example.com'], 's', 'keep me')")
        await store.execute("UPDATE email_deliveries SET updated_at = now() - interval '500 days', created_at = now() - interval '500 days' "
                            "WHERE dedupe_key = 'waiting'")
        seen: list[tuple[str, int, int]] = []
        result = await prune(store, PruneSettings(batch_size=2), progress=lambda *a: seen.append(a))
        assert (result.scrubbed, result.deleted) == (9, 5)
        rows = {r["dedupe_key"]: r for r in await store.fetch("SELECT * FROM email_deliveries")}
        assert not any(k.startswith("ancient") for k in rows)
        month = rows["month1"]
        assert month["status"] == "failed" and month["text_body"] == "" and month["html_body"] is None
        assert month["attachments"] == [] and month["headers"] == {} and month["scrubbed_at"] is not None
        assert rows["recent1"]["text_body"] == "secret body"
        assert rows["waiting"]["text_body"] == "keep me", "non-final rows are never pruned"
        assert seen[-1][0] == "deleted" and seen[-1][1] == seen[-1][2] == 5
        assert await prune(store, PruneSettings()) == type(result)(0, 0, 0, 0)
    finally:
        await store.close()


async def test_prune_as_the_daemon_forgets_old_unmatched_events_and_tokens_and_keeps_the_rest(
        db_url: str, roles: tuple[str, str]) -> None:
    app, daemon = roles
    owner = await SqlStore.open(db_url)
    await owner.run_script(grant_statements(app, daemon))
    await owner.execute("INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body) "
                        "VALUES ('kept', ARRAY['a@example.com'], 's', 'b')")
    await owner.execute(
        "INSERT INTO email_delivery_events (delivery_id, provider, provider_event_id, kind, received_at) "
        "SELECT CASE WHEN e LIKE 'matched%' THEN (SELECT id FROM email_deliveries) END, 'resend', e, 'delivered', "
        "now() - CASE WHEN e LIKE '%old' THEN interval '400 days' ELSE interval '1 day' END "
        "FROM unnest(ARRAY['unmatched-old', 'unmatched-new', 'matched-old']) AS e")
    await owner.execute("INSERT INTO email_webhook_tokens (provider, token, body_sha256, seen_at) VALUES "
                        "('mailgun', 'old', '\\x00', now() - interval '25 hours'), "
                        "('mailgun', 'new', '\\x00', now() - interval '1 hour')")
    await owner.close()
    store = await Store.open(as_user(db_url, daemon))
    try:
        result = await prune(store, PruneSettings(batch_size=1))
        assert (result.unmatched_events, result.webhook_tokens) == (1, 1)
    finally:
        await store.close()
    owner = await SqlStore.open(db_url)
    try:
        events = {r["provider_event_id"] for r in await owner.fetch("SELECT provider_event_id FROM email_delivery_events")}
        assert events == {"unmatched-new", "matched-old"}, "a matched event goes only with its row"
        assert [r["token"] for r in await owner.fetch("SELECT token FROM email_webhook_tokens")] == ["new"]
    finally:
        await owner.close()


# 200 batches of each kind (scrub, delete), as 200,000 rows in batches of 1,000 gave, in a tenth of
# the rows: a batch loop that stopped early would still leave rows behind.
OLD_ROWS, PRUNE_BATCH = 20_000, 100


async def test_pending_rows_are_claimed_while_prune_runs_over_20000_rows_in_200_batches(db_url: str) -> None:
    store = await SqlStore.open(db_url)
    try:
        await aged_rows(store, "old", OLD_ROWS, "sent", "400 days")
        await store.execute("INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body) "
                            "SELECT 'p' || g, ARRAY['a@example.com'], 's', 'b' FROM generate_series(1, 2000) g")
        claim_waits: list[float] = []
        pruned: list[PruneResult] = []
        claims_done_while_pruning = False

        async def pruner() -> None:
            pruned.append(await prune(store, PruneSettings(batch_size=PRUNE_BATCH)))

        async def claimer() -> None:
            nonlocal claims_done_while_pruning
            session = await ClaimSession.open(db_url)
            try:
                while True:
                    started = time.perf_counter()
                    batch = await session.claim_due(50, "w")
                    claim_waits.append(time.perf_counter() - started)
                    if not batch:
                        break
                    await anyio.sleep(0.005)
                claims_done_while_pruning = not pruned
            finally:
                await session.close()

        async with anyio.create_task_group() as tg:
            tg.start_soon(pruner)
            tg.start_soon(claimer)
        assert claims_done_while_pruning, "the prune ended before the claims did: they did not run alongside it"
        assert (pruned[0].scrubbed, pruned[0].deleted) == (OLD_ROWS, OLD_ROWS)
        stats = await store.stats()
        assert stats["pending"] == 0 and stats["sending"] == 2000
        assert (await store.fetch("SELECT count(*) AS n FROM email_deliveries WHERE dedupe_key LIKE 'old%'"))[0]["n"] == 0
        claim_waits.sort()
        print(f"claims during prune: n={len(claim_waits)} median={claim_waits[len(claim_waits) // 2] * 1000:.1f} ms "
              f"max={claim_waits[-1] * 1000:.1f} ms")
    finally:
        await store.close()


async def test_the_daemon_prunes_periodically_when_configured(running, store: Store) -> None:  # type: ignore[no-untyped-def]
    await aged_rows(store, "ancient", 3, "sent", "400 days")
    await running(prune={"interval_seconds": 0.2})
    with anyio.fail_after(10):
        while (await store.fetch("SELECT count(*) AS n FROM email_deliveries"))[0]["n"]:
            await anyio.sleep(0.1)
