"""The claim session plans its statements once, and a plan made on small tables stays an index plan.

Planning the claim afresh for every call cost PostgreSQL as much CPU as running it for eight rows,
so the claim session keeps generic plans. A generic plan is made once, from the statistics of the
moment, and kept while a table grows: made on an empty queue, the claim scanned 200,000 rows. These
tests make every plan while the tables hold one row, grow them to 30,000 rows without new
statistics, and count the rows PostgreSQL then reads for one claim, outcome write and batch.
"""

from __future__ import annotations

import pytest

from outbox_mailer.delivery import Status
from outbox_mailer.store import ClaimSession
from tests.integration.test_store import insert_rows, write_for
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio

TABLES = ("email_deliveries", "email_queue", "email_delivery_attempts", "email_batches")
GROWN = 30_000


async def _rows_read(store: SqlStore, session: ClaimSession) -> int:
    """Rows read so far from the hot tables by sequential and index scans. The counts of every
    connection that reads them (the session's, and the store's one connection) are flushed first: a
    backend flushes on its own, when idle, at most once a second, so a connection left unflushed
    could add its reads between two readings. pg_stat_force_next_flush() makes the flush happen as
    the statement ends, before PostgreSQL answers it."""
    await session._conn.execute("SELECT pg_stat_force_next_flush()")
    await store.execute("SELECT pg_stat_force_next_flush()")
    rows = await store.fetch(
        "SELECT sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)) AS n FROM pg_stat_user_tables "
        "WHERE relname = ANY($1::text[])", list(TABLES))
    return int(rows[0]["n"])


async def _one_cycle(session: ClaimSession, batch: int) -> None:
    """What the daemon does with a claim: a recorded batch, the outcome write, a rescuer's look-ups."""
    claimed = await session.claim_due(batch, "w")
    assert len(claimed) == batch
    assert await session.open_batch("resend", f"key-{claimed[0].id}", claimed) is not None
    writes = [write_for(d, Status.SENT) for d in claimed]
    assert await session.attempts_recorded(writes) == set()
    assert await session.record_outcomes(writes) == {d.id for d in claimed}
    assert await session.find_dead_claims(3600, 10) == []
    await session.batches([1])


async def test_plans_made_on_small_tables_read_few_rows_once_the_tables_are_large(db_url: str) -> None:
    store = await SqlStore.open(db_url, max_size=1)  # one connection: _rows_read flushes its counts
    session = await ClaimSession.open(db_url)
    try:
        for table in TABLES:  # no statistics refreshed behind the test's back
            await store.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
        await insert_rows(store, 1, prefix="small-")
        await store.execute("ANALYZE")
        await _one_cycle(session, 1)  # every plan is made now, on tables of one row
        await insert_rows(store, GROWN, prefix="big-")
        await store.execute("INSERT INTO email_delivery_attempts (delivery_id, attempt, started_at, finished_at, "
                            "outcome, transport, worker) SELECT id, 1, now(), now(), 'transient', 'smtp', 'w' "
                            "FROM email_deliveries")
        before = await _rows_read(store, session)
        await _one_cycle(session, 8)
        read = await _rows_read(store, session) - before
        assert read < 200, f"one cycle of 8 rows read {read} rows: a plan scans a table"
    finally:
        await session.close()
        await store.close()


async def test_the_claim_session_plans_each_statement_once(db_url: str) -> None:
    store = await SqlStore.open(db_url)
    session = await ClaimSession.open(db_url)
    try:
        await insert_rows(store, 40)
        for _ in range(8):
            await _one_cycle(session, 4)
        plans = await session._conn.fetch(
            "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE 'WITH released AS%' OR statement LIKE 'WITH decided AS%'")
        assert len(plans) == 2
        for p in plans:
            assert p["custom_plans"] == 0 and p["generic_plans"] == 8, p["statement"][:30]
    finally:
        await session.close()
        await store.close()
