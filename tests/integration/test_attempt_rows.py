"""Schema 16: attempt rows keyed by (delivery, attempt, start); attempts and queue entries deleted with
their row by a trigger, not by a foreign key."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from outbox_mailer.delivery import Status
from outbox_mailer.errors import DatabaseError
from outbox_mailer.store import ClaimSession
from tests.conftest import psql
from tests.integration.test_roles_and_retention import as_user
from tests.integration.test_store import insert_rows, write_for
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio


async def _settle(db_url: str, n: int) -> None:
    """n rows claimed and recorded as sent: one attempt row each."""
    session = await ClaimSession.open(db_url)
    try:
        claimed = await session.claim_due(n, "w")
        assert len(claimed) == n
        assert len(await session.record_outcomes([write_for(d, Status.SENT) for d in claimed])) == n
    finally:
        await session.close()


async def _attempts(store: SqlStore, prefix: str) -> dict[str, int]:
    rows = await store.fetch(
        "SELECT d.dedupe_key, count(a.*) AS n FROM email_deliveries d "
        "LEFT JOIN email_delivery_attempts a ON a.delivery_id = d.id WHERE d.dedupe_key LIKE $1 || '%' "
        "GROUP BY d.dedupe_key", prefix)
    return {r["dedupe_key"]: r["n"] for r in rows}


async def _orphans(store: SqlStore) -> int:
    [row] = await store.fetch(
        "SELECT (SELECT count(*) FROM email_delivery_attempts a WHERE NOT EXISTS "
        "        (SELECT 1 FROM email_deliveries d WHERE d.id = a.delivery_id))"
        "     + (SELECT count(*) FROM email_queue q WHERE NOT EXISTS "
        "        (SELECT 1 FROM email_deliveries d WHERE d.id = q.delivery_id)) AS n")
    return row["n"]


async def test_a_deleted_row_takes_its_attempts_and_queue_entry_with_it_even_for_a_role_without_rights_on_them(
        store: SqlStore, db_url: str) -> None:
    await insert_rows(store, 3, prefix="del-")
    await _settle(db_url, 3)
    assert await _attempts(store, "del-") == {"del-1": 1, "del-2": 1, "del-3": 1}
    await insert_rows(store, 2, prefix="del-pending-")  # queued, never claimed
    role = f"cleaner_{uuid.uuid4().hex[:8]}"
    psql(db_url, f"CREATE ROLE {role} LOGIN; GRANT SELECT, DELETE ON email_deliveries TO {role}")
    try:
        conn = await asyncpg.connect(as_user(db_url, role))
        try:
            for table in ("email_delivery_attempts", "email_queue"):
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await conn.execute(f"DELETE FROM {table}")
            assert await conn.execute(
                "DELETE FROM email_deliveries WHERE dedupe_key IN ('del-1', 'del-3', 'del-pending-1')") == "DELETE 3"
        finally:
            await conn.close()
    finally:
        psql(db_url, f"DROP OWNED BY {role}; DROP ROLE {role}")
    assert await _attempts(store, "del-") == {"del-2": 1, "del-pending-2": 0}
    assert [r["dedupe_key"] for r in await store.fetch(
        "SELECT d.dedupe_key FROM email_queue q JOIN email_deliveries d ON d.id = q.delivery_id")] == ["del-pending-2"]
    assert await _orphans(store) == 0


@pytest.mark.parametrize("tables", ["email_deliveries", "email_deliveries, email_delivery_attempts, email_queue"])
async def test_truncating_the_table_empties_the_attempts_and_the_queue_too(
        store: SqlStore, db_url: str, tables: str) -> None:
    await insert_rows(store, 2, prefix="trunc-")
    await _settle(db_url, 2)
    await insert_rows(store, 1, prefix="trunc-pending-")
    await store.execute(f"TRUNCATE {tables} CASCADE")
    assert await store.fetch("SELECT (SELECT count(*) FROM email_delivery_attempts) "
                             "+ (SELECT count(*) FROM email_queue) AS n") == [{"n": 0}]


async def test_an_outcome_write_repeated_after_a_lost_commit_reply_adds_no_second_attempt(
        store: SqlStore, db_url: str) -> None:
    await insert_rows(store, 4, prefix="again-")
    session = await ClaimSession.open(db_url)
    try:
        claimed = await session.claim_due(4, "w")
        writes = [write_for(d, Status.SENT) for d in claimed]
        assert len(await session.record_outcomes(writes)) == 4
        # the same statement again, as the recorder sends it when the COMMIT's reply was lost
        assert await session.record_outcomes(writes) == set()
        assert await session.attempts_recorded(writes) == {d.id for d in claimed}
    finally:
        await session.close()
    assert await _attempts(store, "again-") == {f"again-{i}": 1 for i in range(1, 5)}


async def test_an_attempt_names_its_row_by_delivery_attempt_and_start(store: SqlStore, db_url: str) -> None:
    await insert_rows(store, 1, prefix="key-")
    await _settle(db_url, 1)
    [row] = await store.fetch("SELECT delivery_id, attempt, started_at FROM email_delivery_attempts")
    with pytest.raises(DatabaseError, match="email_delivery_attempts_pkey"):
        await store.execute(
            "INSERT INTO email_delivery_attempts (delivery_id, attempt, started_at, finished_at, outcome, transport, "
            "worker) VALUES ($1, $2, $3, $3, 'sent', 'smtp', 'w')", row["delivery_id"], row["attempt"],
            row["started_at"])
