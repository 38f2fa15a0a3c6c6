"""An outcome write that carries the next claim: one statement, the same fences, locks and results.

``ClaimSession.record_and_claim`` writes outcomes and claims the next rows in one statement (one
round trip and one commit fewer, docs/hot-path.md). The write is fenced as alone, the claim claims as
alone, the written keys stay locked until a later claim (the session's one rule for unlocking), and
a daemon that lost the statement's reply writes the outcomes again without counting its own
committed outcomes as lost claims.
"""

from __future__ import annotations

import dataclasses
import uuid
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from outbox_mailer.clock import monotonic
from outbox_mailer.daemon.service import Daemon
from outbox_mailer.delivery import Status
from outbox_mailer.store import ClaimSession
from tests.in_process_daemon import settings_for
from tests.integration.test_store import insert_rows, write_for
from tests.smtp_server import SmtpTestServer
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio
UNUSED_SMTP = {"host": "127.0.0.1", "port": 25, "tls": "none", "data_timeout_seconds": 2, "send_timeout_seconds": 2}


async def _value(store: SqlStore, statement: str, *args: object) -> object:
    [row] = await store.fetch(statement, *args)
    return next(iter(row.values()))


async def _advisory_locks(store: SqlStore, session: ClaimSession) -> int:
    pid = await session._conn.fetchval("SELECT pg_backend_pid()")
    return int(await _value(store, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = $1", pid))  # type: ignore[call-overload]  # a count


async def test_the_write_is_fenced_and_the_claim_takes_the_next_due_rows(db_url: str, store: SqlStore) -> None:
    await insert_rows(store, 4)
    session = await ClaimSession.open(db_url)
    try:
        first = await session.claim_due(2, "w")
        ours, stolen = first
        forged = dataclasses.replace(stolen, claim_token=uuid.uuid4())  # as if rescued and claimed again
        written, claimed = await session.record_and_claim(
            [write_for(ours, Status.SENT), write_for(forged, Status.SENT)], 10, "w")
        assert written == {ours.id}, "the fence refused the write whose claim was not ours"
        assert {d.id for d in claimed}.isdisjoint({ours.id, stolen.id}) and len(claimed) == 2
        states = {r["id"]: (r["status"], r["attempts"]) for r in await store.fetch(
            "SELECT id, status, attempts FROM email_deliveries")}
        assert states[ours.id] == ("sent", 1) and states[stolen.id] == ("sending", 1)
        assert {states[d.id] for d in claimed} == {("sending", 1)}
        assert await _value(store, "SELECT count(*) FROM email_delivery_attempts") == 2, \
            "each attempt made is written, its claim still ours or not (as record_outcomes does)"
        assert await _value(store, "SELECT count(*) FROM email_queue WHERE claimed_at IS NULL") == 0
    finally:
        await session.close()


async def test_a_row_the_write_gives_back_is_claimed_by_a_later_claim_not_by_the_one_it_carries(
        db_url: str, store: SqlStore) -> None:
    await insert_rows(store, 1)
    session = await ClaimSession.open(db_url)
    try:
        [row] = await session.claim_due(1, "w")
        back = write_for(row, Status.PENDING, scheduled_at=row.scheduled_at, refund_attempt=True,
                         given_back=True)  # untried: not charged, no attempt written
        written, claimed = await session.record_and_claim([back], 10, "w")
        assert written == {row.id} and claimed == [], "the claim saw the row as the statement began: claimed"
        assert await _value(store, "SELECT status FROM email_deliveries WHERE id = $1", row.id) == "pending"
        [again] = await session.claim_due(10, "w")
        assert again.id == row.id and again.attempts == 1, "given back untried: not charged, claimed again"
    finally:
        await session.close()


async def test_the_written_keys_stay_locked_until_a_later_claim_releases_them(db_url: str, store: SqlStore) -> None:
    await insert_rows(store, 6)
    session = await ClaimSession.open(db_url)
    try:
        first = await session.claim_due(2, "w")
        assert await _advisory_locks(store, session) == 2
        _, second = await session.record_and_claim([write_for(d, Status.SENT) for d in first], 2, "w")
        assert len(second) == 2
        assert await _advisory_locks(store, session) == 4, \
            "a written key is unlocked after its outcome committed, not in the statement that writes it"
        _, third = await session.record_and_claim([write_for(d, Status.SENT) for d in second], 2, "w")
        assert len(third) == 2
        assert await _advisory_locks(store, session) == 4, "the first claim's keys were released, the second's kept"
        assert await session.go_idle() == 2
        assert await _advisory_locks(store, session) == 2, "only the rows still claimed stay locked"
    finally:
        await session.close()


async def test_outcomes_a_lost_reply_had_committed_are_counted_as_written_not_as_lost_claims(
        db_url: str, store: SqlStore) -> None:
    settings = settings_for(db_url, SimpleNamespace(host="", port=0), smtp=UNUSED_SMTP)
    daemon = Daemon(settings, {})  # its parts, not its loops
    session = await ClaimSession.open(db_url)
    try:
        await insert_rows(store, 3)
        rows = await session.claim_due(3, daemon.worker)
        daemon.inflight.hold(rows, monotonic())
        writes = [write_for(d, Status.SENT) for d in rows]
        written, _ = await session.record_and_claim(writes, 1, daemon.worker)
        assert written == {d.id for d in rows}
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.recorder.run)
            daemon.recorder.retry(writes)  # the claim loop saw the statement fail: its reply was lost
            await daemon.recorder.inbox.aclose()
        assert daemon.recorder.counts["sent"] == 3 and daemon.recorder.counts["claim_lost"] == 0, \
            daemon.recorder.counts
        assert await _value(store, "SELECT count(*) FROM email_delivery_attempts") == 3, "each attempt once"
        assert len(daemon.inflight) == 0, "the rows are no longer held"
    finally:
        await session.close()
        await daemon._db.close()
        await daemon._limits.close()


async def test_a_busy_daemon_writes_outcomes_with_its_claims_and_sends_every_row_once(
        running: Any, store: SqlStore, smtp_server: SmtpTestServer) -> None:
    smtp_server.delay("DATA", 0.02)  # sends return a few at a time, at a relay's pace
    run = await running(concurrency=8)
    await insert_rows(store, 120, prefix="busy-")
    keys = [f"busy-{i}" for i in range(1, 121)]
    rows = await run.final(*keys, timeout=60)
    assert {(r["status"], r["attempts"]) for r in rows.values()} == {("sent", 1)}
    assert sorted(m.rcpt_tos for m in smtp_server.accepted).count(("a@example.com",)) == 120, "each sent once"
    assert await _value(store, "SELECT count(*) FROM email_delivery_attempts") == 120, "each attempt written once"
    recorder = run.daemon.recorder
    assert recorder.counts["sent"] == 120 and recorder.counts["claim_lost"] == 0, recorder.counts
    assert recorder.carried_writes > 0, "outcome writes rode on the claims that followed their sends"
