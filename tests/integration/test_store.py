"""The store against a real PostgreSQL: claiming, fencing, locks, migrations."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import anyio
import pytest

from outbox_mailer.decide import Transition
from outbox_mailer.delivery import OutcomeKind, Status
from outbox_mailer.errors import InvalidTransition, NotFound, SchemaMismatch
from outbox_mailer.store import (
    AttemptRecord,
    ClaimSession,
    Listener,
    OutcomeWrite,
    Store,
)
from outbox_mailer.store.migrations import Migration, load_migrations
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio


async def insert_rows(store: Store, n: int, *, prefix: str = "k", **extra: object) -> None:
    await store.execute(
        "INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, priority) "
        "SELECT $1 || g, ARRAY['a@example.com'], 'hi', 'body', $2 FROM generate_series(1, $3) g",
        prefix, int(extra.get("priority", 0)), n,
    )


def write_for(delivery, status: Status, **kw: object) -> OutcomeWrite:  # type: ignore[no-untyped-def]
    now = datetime.now(UTC)
    transition = Transition(status, sent_at=now if status is Status.SENT else None, **kw)  # type: ignore[arg-type]
    attempt = AttemptRecord(delivery.attempts, now, now, OutcomeKind.SENT, 250, None, None, "smtp", "test")
    return OutcomeWrite(delivery, transition, attempt)


async def test_four_claimers_never_claim_a_row_twice(db_url: str, store: Store) -> None:
    await insert_rows(store, 2000)
    claimed: list[list[int]] = [[] for _ in range(4)]

    async def claimer(i: int) -> None:
        session = await ClaimSession.open(db_url)
        try:
            while True:
                batch = await session.claim_due(37, f"w{i}")
                if not batch:
                    return
                claimed[i].extend(d.id for d in batch)
                await session.record_outcomes([write_for(d, Status.SENT) for d in batch])
        finally:
            await session.close()

    async with anyio.create_task_group() as tg:
        for i in range(4):
            tg.start_soon(claimer, i)
    everything = [x for c in claimed for x in c]
    assert len(everything) == 2000
    assert len(set(everything)) == 2000
    assert sum(1 for c in claimed if c) >= 2, "the race needs at least two claimers taking work"
    stats = await store.stats()
    assert stats["sent"] == 2000 and stats["sending"] == 0


async def test_claim_takes_priority_then_age_and_increments_attempts(db_url: str, store: Store) -> None:
    await insert_rows(store, 3, prefix="low")
    await insert_rows(store, 2, prefix="high", priority=5)
    session = await ClaimSession.open(db_url)
    try:
        batch = await session.claim_due(3, "w")
    finally:
        await session.close()
    assert [d.dedupe_key for d in batch][:2] == ["high1", "high2"]
    assert all(d.attempts == 1 for d in batch)
    rows = await store.fetch("SELECT status, claimed_by FROM email_deliveries WHERE claim_token IS NOT NULL")
    assert len(rows) == 3 and all(r["status"] == "sending" and r["claimed_by"] == "w" for r in rows)


async def test_future_rows_are_not_claimed(db_url: str, store: Store) -> None:
    await store.execute(
        "INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, scheduled_at) "
        "VALUES ('later', ARRAY['a@example.com'], 's', 'b', now() + interval '1 hour')"
    )
    session = await ClaimSession.open(db_url)
    try:
        assert await session.claim_due(10, "w") == []
        next_due = await session.next_due_at()
    finally:
        await session.close()
    assert next_due is not None and next_due > datetime.now(UTC)


async def test_a_key_locked_by_another_session_is_skipped(db_url: str, store: Store) -> None:
    await insert_rows(store, 2)
    holder = await ClaimSession.open(db_url)
    other = await ClaimSession.open(db_url)
    try:
        first = await holder.claim_due(1, "holder")
        # put the claimed row back to pending while the holder keeps its advisory lock
        await holder.record_outcomes([write_for(first[0], Status.PENDING)])  # unlock left for the next claim
        second = await other.claim_due(10, "other")
        assert [d.dedupe_key for d in second] == ["k2"], "the key still locked by the holder must be skipped"
        assert await holder.go_idle() == 1
        third = await other.claim_due(10, "other")
        assert [d.dedupe_key for d in third] == [first[0].dedupe_key]
    finally:
        await holder.close()
        await other.close()


async def test_a_deferred_unlock_holds_the_key_until_the_next_claim(db_url: str, store: Store) -> None:
    await insert_rows(store, 1)
    holder = await ClaimSession.open(db_url)
    other = await ClaimSession.open(db_url)
    try:
        [delivery] = await holder.claim_due(1, "holder")
        # back to pending and due now: only the advisory lock can keep another session off it
        assert await holder.record_outcomes([write_for(delivery, Status.PENDING)]) == {delivery.id}
        assert holder.deferred_unlocks == 1
        assert await other.claim_due(10, "other") == [], "the outcome committed but the lock is still held"
        # the holder's next claim releases the lock first, then claims (here: re-takes the same row)
        again = await holder.claim_due(10, "holder")
        assert [d.id for d in again] == [delivery.id] and holder.deferred_unlocks == 0
        await holder.record_outcomes([write_for(again[0], Status.PENDING)])
        assert await other.claim_due(10, "other") == [], "re-taken: held once more, not leaked nor doubled"
        assert await holder.go_idle() == 1
        assert [d.id for d in await other.claim_due(10, "other")] == [delivery.id]
        held = await holder._conn.fetchval(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
        assert held == 0, "every lock the holder took was released exactly once"
    finally:
        await holder.close()
        await other.close()


async def test_mark_sent_is_refused_after_claim_lost(db_url: str, store: Store) -> None:
    await insert_rows(store, 1)
    session = await ClaimSession.open(db_url)
    try:
        [delivery] = await session.claim_due(1, "w")
        # someone else (a rescuer, an operator) changed the claim token meanwhile
        await store.execute("UPDATE email_deliveries SET claim_token = $1 WHERE id = $2", uuid.uuid4(), delivery.id)
        updated = await session.record_outcomes([write_for(delivery, Status.SENT)])
    finally:
        await session.close()
    assert updated == set()
    [row] = await store.status(["k1"])
    assert row["status"] == "sending"
    attempts = await store.attempts(delivery.id)
    assert len(attempts) == 1, "the attempt happened and is recorded even though the claim was lost"


async def test_closing_a_session_releases_its_locks(db_url: str, store: Store) -> None:
    await insert_rows(store, 1)
    a = await ClaimSession.open(db_url)
    [delivery] = await a.claim_due(1, "a")
    await a.close()
    b = await ClaimSession.open(db_url)
    try:
        await store.execute(
            "UPDATE email_deliveries SET claimed_at = now() - interval '1 hour' WHERE id = $1", delivery.id
        )
        dead = await b.find_dead_claims(60, 10)
        assert [c.delivery.id for c in dead] == [delivery.id]
        assert await b.record_outcomes([write_for(dead[0].delivery, Status.PENDING)]) == {delivery.id}
    finally:
        await b.close()
    [row] = await store.status(["k1"])
    assert row["status"] == "pending"


async def test_a_live_claim_is_not_found_dead(db_url: str, store: Store) -> None:
    await insert_rows(store, 1)
    live = await ClaimSession.open(db_url)
    rescuer = await ClaimSession.open(db_url)
    try:
        [delivery] = await live.claim_due(1, "live")
        await store.execute(
            "UPDATE email_deliveries SET claimed_at = now() - interval '1 hour' WHERE id = $1", delivery.id
        )
        assert await rescuer.find_dead_claims(60, 10) == []
    finally:
        await live.close()
        await rescuer.close()


async def test_insert_and_requeue_notify_listeners_and_nothing_else_does(db_url: str, store: Store) -> None:
    heard: list[None] = []
    listener = await Listener.open(db_url, lambda: heard.append(None))
    session = await ClaimSession.open(db_url)

    async def notifications(action) -> int:  # type: ignore[no-untyped-def]
        before = len(heard)
        await action
        await anyio.sleep(0.3)
        return len(heard) - before

    try:
        assert await notifications(insert_rows(store, 60)) == 1, "one per inserting statement"
        batch = await session.claim_due(2, "w")
        assert await notifications(session.claim_due(2, "w")) == 0, "a claim wakes nobody"
        assert await notifications(session.record_outcomes([write_for(d, Status.SENT) for d in batch])) == 0
        later = Transition(Status.PENDING, scheduled_at=datetime(2099, 1, 1, tzinfo=UTC))
        [again] = await session.claim_due(1, "w")
        write = OutcomeWrite(again, later, write_for(again, Status.PENDING).attempt)
        assert await notifications(session.record_outcomes([write])) == 0, "a retry for later: the timer covers it"
        [back] = await session.claim_due(1, "w")
        untried = Transition(Status.PENDING, refund_attempt=True, given_back=True)
        assert await notifications(session.record_outcomes([OutcomeWrite(back, untried, write.attempt)])) == 1, \
            "a claim given back untried is due now"
        assert await notifications(store.cancel("k10")) == 0
        assert await notifications(store.retry("k10", 3)) == 1, "requeued and due now"
        requeue_many = store.execute("UPDATE email_deliveries SET status = 'pending', claim_token = NULL, "
                                     "claimed_at = NULL, claimed_by = NULL WHERE status = 'sending'")
        assert await notifications(requeue_many) == 1, "the notifications of one transaction fold into one"
    finally:
        await session.close()
        await listener.close()


async def test_retry_and_cancel_follow_the_rules(store: Store) -> None:
    await insert_rows(store, 2)
    await store.cancel("k1")
    with pytest.raises(InvalidTransition):
        await store.cancel("k1")
    with pytest.raises(NotFound):
        await store.cancel("nope")
    with pytest.raises(InvalidTransition):
        await store.retry("k2", 3)  # pending cannot be retried
    await store.retry("k1", 3)
    [row] = await store.status(["k1"])
    assert row["status"] == "pending" and row["max_attempts"] == 3


async def test_migrate_is_idempotent_and_records_versions(empty_db_url: str) -> None:
    s = await SqlStore.open(empty_db_url)
    try:
        assert await s.schema_version() is None
        first = await s.migrate(load_migrations())
        assert [m.version for m in first] == list(range(1, len(load_migrations()) + 1))
        assert await s.migrate(load_migrations()) == []
        assert await s.schema_version() == len(load_migrations())
    finally:
        await s.close()


async def test_concurrent_migrate_runs_apply_once(empty_db_url: str) -> None:
    results: list[int] = []

    async def run() -> None:
        s = await SqlStore.open(empty_db_url)
        try:
            results.append(len(await s.migrate(load_migrations())))
        finally:
            await s.close()

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(run)
    assert sorted(results) == [0, 0, 0, len(load_migrations())]


async def test_edited_applied_migration_is_refused(empty_db_url: str) -> None:
    s = await SqlStore.open(empty_db_url)
    try:
        await s.migrate(load_migrations())
        tampered = [Migration(m.version, m.name, m.sql + "\n-- edited\n") for m in load_migrations()]
        with pytest.raises(SchemaMismatch):
            await s.migrate(tampered)
    finally:
        await s.close()


async def test_a_session_does_not_find_its_own_claims_dead(db_url: str, store: Store) -> None:
    await insert_rows(store, 1)
    session = await ClaimSession.open(db_url)
    try:
        [delivery] = await session.claim_due(1, "w")
        await store.execute("UPDATE email_deliveries SET claimed_at = now() - interval '1 hour'")
        assert await session.find_dead_claims(60, 10, own=[delivery.id]) == []
    finally:
        await session.close()


async def test_relock_retakes_free_keys_and_reports_taken_ones(db_url: str, store: Store) -> None:
    other = await ClaimSession.open(db_url)
    mine = await ClaimSession.open(db_url)
    try:
        await insert_rows(store, 1)
        [delivery] = await other.claim_due(1, "other")
        assert await mine.relock(["free-key", delivery.dedupe_key]) == [delivery.dedupe_key]
        # 'free-key' is now held by `mine`: nobody else can take it
        assert await other.relock(["free-key"]) == ["free-key"]
    finally:
        await other.close()
        await mine.close()


async def test_rows_of_a_paused_transport_are_not_claimed(db_url: str, store: Store) -> None:
    await insert_rows(store, 2)
    await store.execute("UPDATE email_deliveries SET transport = 'api' WHERE dedupe_key = 'k2'")
    session = await ClaimSession.open(db_url)
    try:
        assert [d.dedupe_key for d in await session.claim_due(10, "w", paused=["smtp"])] == ["k2"]
        assert [d.dedupe_key for d in await session.claim_due(10, "w", paused=[])] == ["k1"]
    finally:
        await session.close()


async def test_an_idle_session_unlocks_each_outcome_right_after_its_write(db_url: str, store: Store) -> None:
    await insert_rows(store, 1)
    holder = await ClaimSession.open(db_url)
    other = await ClaimSession.open(db_url)
    try:
        [delivery] = await holder.claim_due(1, "holder")
        assert await holder.go_idle() == 0, "the claimed key is not committed yet: it stays locked"
        await holder.record_outcomes([write_for(delivery, Status.PENDING)])
        assert holder.deferred_unlocks == 0
        held = await holder._conn.fetchval(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
        assert held == 0, "idle: no claim is coming to carry the unlock"
        assert [d.id for d in await other.claim_due(10, "other")] == [delivery.id]
    finally:
        await holder.close()
        await other.close()


async def test_a_dead_claim_in_a_batch_comes_with_every_member_of_that_batch_whatever_its_claim_time(
        db_url: str, store: SqlStore) -> None:
    await insert_rows(store, 4)
    dead = await ClaimSession.open(db_url)
    first = await dead.claim_due(2, "dead")
    second = await dead.claim_due(2, "dead")
    assert await dead.open_batch("resend", "batch-key", [*first, *second]) is not None
    await dead.close()
    await store.execute("UPDATE email_deliveries SET claimed_at = now() - interval '1 hour' WHERE id = $1",
                        first[0].id)  # only this member's claim is old enough to rescue
    rescuer = await ClaimSession.open(db_url)
    try:
        found = await rescuer.find_dead_claims(60, 1)
        assert sorted(c.delivery.id for c in found) == sorted(d.id for d in [*first, *second])
        assert {(c.batch_id is not None, c.batch_rows) for c in found} == {(True, 4)}
    finally:
        await rescuer.close()
