"""Schema 8: the slim queue beside email_deliveries, and the hot-path rule.

The claim and the outcome write must be HOT updates of email_deliveries (no
index covers a column they change), and email_queue must hold exactly the rows
the daemons still have to settle, whoever changed a row's status.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from outbox_mailer.delivery import Status
from outbox_mailer.store import ClaimSession
from outbox_mailer.store.queries import sql
from tests.integration.test_store import insert_rows, write_for
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio

# A receipt of about 1.8 KB (text and HTML), as the benchmark's realistic run sends.
FAT_BODY = "Thank you for your order. " * 30
FAT_HTML = "<p>Thank you for your <b>order</b>.</p>" * 25


def _set_columns(statement: str) -> set[str]:
    """Columns assigned by every `UPDATE email_deliveries ... SET` in a statement."""
    columns: set[str] = set()
    for match in re.finditer(r"UPDATE email_deliveries d\s+SET (.*?)\n\s*FROM", statement, re.S):
        columns |= set(re.findall(r"(?:^|,)\s*([a-z_]+) =", match.group(1), re.M))
    return columns


async def _queue(store: SqlStore) -> dict[str, dict[str, object]]:
    rows = await store.fetch("SELECT d.dedupe_key, q.claimed_at, q.scheduled_at, q.priority, q.transport "
                             "FROM email_queue q JOIN email_deliveries d ON d.id = q.delivery_id")
    return {r["dedupe_key"]: r for r in rows}


async def test_no_index_of_email_deliveries_covers_a_column_the_hot_path_writes(store: SqlStore) -> None:
    written = _set_columns(sql("claim_due")) | _set_columns(sql("record_outcomes"))
    assert {"status", "claim_token", "attempts", "updated_at", "sent_at", "scheduled_at"} <= written
    indexes = await store.fetch(
        "SELECT i.indexrelid::regclass::text AS name, "
        "ARRAY(SELECT a.attname FROM pg_attribute a WHERE a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)) "
        "AS columns, coalesce(pg_get_expr(i.indpred, i.indrelid), '') || ' ' "
        "|| coalesce(pg_get_expr(i.indexprs, i.indrelid), '') AS expressions "
        "FROM pg_index i WHERE i.indrelid = 'email_deliveries'::regclass")
    assert indexes, "email_deliveries has its primary key at least"
    for index in indexes:
        used = set(index["columns"]) | set(re.findall(r"[a-z_]+", index["expressions"]))
        assert not used & written, f"{index['name']} covers {used & written}, which the hot path writes"


async def test_claim_and_outcome_write_are_hot_updates_of_fat_rows(store: SqlStore, db_url: str) -> None:
    await store.execute(
        "INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, html_body) "
        "SELECT 'fat' || g, ARRAY['a@example.com'], 'Your order', $1 || g, $2 || g FROM generate_series(1, 300) g",
        FAT_BODY, FAT_HTML)
    before = (await store.fetch("SELECT pg_stat_force_next_flush()"),
              await store.fetch("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
                                "WHERE relname = 'email_deliveries'"))[1][0]
    session = await ClaimSession.open(db_url)
    try:
        claimed = []
        while batch := await session.claim_due(100, "w"):
            claimed += batch
            await session.record_outcomes([write_for(d, Status.SENT) for d in batch])
        # the session's counts reach the statistics as this statement ends (at close, they would only
        # when its backend has exited, which the close does not wait for)
        await session._conn.execute("SELECT pg_stat_force_next_flush()")
    finally:
        await session.close()
    assert len(claimed) == 300
    await store.fetch("SELECT pg_stat_force_next_flush()")
    after = (await store.fetch("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
                               "WHERE relname = 'email_deliveries'"))[0]
    updates = after["n_tup_upd"] - before["n_tup_upd"]
    hot = after["n_tup_hot_upd"] - before["n_tup_hot_upd"]
    assert updates == 600, "one claim and one outcome write per row"
    assert hot == updates, f"{updates - hot} of {updates} updates copied the row to another page"


async def test_the_queue_holds_pending_rows_and_follows_the_daemon(store: SqlStore, db_url: str) -> None:
    await insert_rows(store, 4, prefix="q")
    await store.execute("INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, status, "
                        "sent_at) VALUES ('imported', ARRAY['a@example.com'], 's', 'b', 'sent', now())")
    queue = await _queue(store)
    assert set(queue) == {"q1", "q2", "q3", "q4"}, "a row inserted as sent is not queued"
    assert all(r["claimed_at"] is None for r in queue.values())
    session = await ClaimSession.open(db_url)
    try:
        batch = {d.dedupe_key: d for d in await session.claim_due(4, "w")}
        queue = await _queue(store)
        assert all(r["claimed_at"] is not None for r in queue.values())
        later = datetime.now(UTC) + timedelta(hours=1)
        await session.record_outcomes([
            write_for(batch["q1"], Status.SENT),
            write_for(batch["q2"], Status.FAILED, last_error="no"),
            write_for(batch["q3"], Status.IN_DOUBT, last_error="?"),
            write_for(batch["q4"], Status.PENDING, scheduled_at=later),
        ])
    finally:
        await session.close()
    queue = await _queue(store)
    assert set(queue) == {"q4"}, "settled and in-doubt rows leave the queue"
    assert queue["q4"]["claimed_at"] is None and queue["q4"]["scheduled_at"] == later


async def test_operator_and_application_changes_are_mirrored_in_the_queue(store: SqlStore) -> None:
    await insert_rows(store, 3, prefix="m")
    await store.cancel("m1")
    assert set(await _queue(store)) == {"m2", "m3"}
    await store.retry("m1", 1)
    assert set(await _queue(store)) == {"m1", "m2", "m3"}
    # an application reschedules and reprioritises a pending row with its own UPDATE
    await store.execute("UPDATE email_deliveries SET scheduled_at = '2030-01-01', priority = 5, "
                        "transport = 'bulk' WHERE dedupe_key = 'm2'")
    m2 = (await _queue(store))["m2"]
    assert (m2["scheduled_at"], m2["priority"], m2["transport"]) == (
        datetime(2030, 1, 1, tzinfo=UTC), 5, "bulk")
    await store.execute("DELETE FROM email_deliveries WHERE dedupe_key = 'm3'")
    assert set(await _queue(store)) == {"m1", "m2"}


async def test_a_daemon_of_an_older_version_keeps_the_queue_true(store: SqlStore) -> None:
    """Between `migrate` and its restart, an old daemon claims and records on email_deliveries alone."""
    await insert_rows(store, 2, prefix="old")
    await store.execute("UPDATE email_deliveries SET status = 'sending', claim_token = gen_random_uuid(), "
                        "claimed_at = now() - interval '1 hour', attempts = 1 WHERE dedupe_key = 'old1'")
    assert (await _queue(store))["old1"]["claimed_at"] is not None, "its claim is visible to a rescuer"
    await store.execute("UPDATE email_deliveries SET status = 'sent', sent_at = now(), claim_token = NULL "
                        "WHERE dedupe_key = 'old1'")
    assert set(await _queue(store)) == {"old2"}


async def test_a_rescuer_finds_a_dead_claim_through_the_queue(store: SqlStore, db_url: str) -> None:
    await insert_rows(store, 1, prefix="dead")
    dead = await ClaimSession.open(db_url)
    [claimed] = await dead.claim_due(1, "dead-worker")
    await store.execute("UPDATE email_queue SET claimed_at = claimed_at - interval '1 hour'")
    await store.execute("UPDATE email_deliveries SET claimed_at = claimed_at - interval '1 hour'")
    rescuer = await ClaimSession.open(db_url)
    try:
        assert await rescuer.find_dead_claims(60, 10) == [], "its lock is still held"
        await dead.close()
        [dead_claim] = await rescuer.find_dead_claims(60, 10)
        found, by = dead_claim.delivery, dead_claim.claimed_by
        assert (found.dedupe_key, found.claim_token, by) == ("dead1", claimed.claim_token, "dead-worker")
        assert found.subject == "hi"
    finally:
        await rescuer.close()


async def test_an_insert_only_application_role_enqueues_through_the_trigger(store: SqlStore, db_url: str) -> None:
    await store.execute("DROP ROLE IF EXISTS queue_app; CREATE ROLE queue_app")
    await store.execute("GRANT INSERT (dedupe_key, to_addresses, subject, text_body) ON email_deliveries "
                        "TO queue_app; GRANT USAGE ON SCHEMA public TO queue_app")
    await store.execute("SET ROLE queue_app; INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, "
                        "text_body) VALUES ('by-app', ARRAY['a@example.com'], 's', 'b'); RESET ROLE")
    assert "by-app" in await _queue(store)
