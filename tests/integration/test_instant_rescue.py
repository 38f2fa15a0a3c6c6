"""Instant recovery on the same host (processes.py, schema 13): claims of a process that is
provably dead are rescued as soon as a daemon starts, whatever the rescue delay; claims of a
process alive here, of another boot or of another pid namespace (a container) keep the delay."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import anyio
import pytest

from outbox_mailer.store import ClaimSession
from outbox_mailer.store.processes import ProcessIdentity, this_process
from tests.integration.conftest import insert
from tests.smtp_server import SmtpTestServer
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio

ME = this_process()
assert ME is not None
NO_SUCH_PID = 4_000_000  # above Linux's pid_max ceiling (2^22): never a process


async def claimed_by_gone_sessions(db_url: str, store: SqlStore, workers: list[str]) -> None:
    """One row per worker, claimed by a session that is then closed: 'sending', its lock free."""
    for worker in workers:
        await insert(store, worker, subject=worker)
    session = await ClaimSession.open(db_url)
    try:
        for worker in workers:
            assert len(await session.claim_due(1, worker)) == 1
    finally:
        await session.close()


async def register(store: SqlStore, worker: str, process: ProcessIdentity) -> None:
    await store.execute("INSERT INTO email_daemon_processes (boot_id, pid_ns, pid, start_ticks, worker) "
                        "VALUES ($1::uuid, $2, $3, $4, $5)", process.boot_id, process.pid_ns, process.pid,
                        process.start_ticks, worker)


async def test_claims_of_a_dead_process_here_are_rescued_at_start_and_the_others_wait(
        running: Any, store: SqlStore, db_url: str, smtp_server: SmtpTestServer) -> None:
    workers = ["killed", "alive", "container", "before-reboot", "unregistered"]
    await claimed_by_gone_sessions(db_url, store, workers)
    await register(store, "killed", dataclasses.replace(ME, pid=NO_SUCH_PID))
    await register(store, "alive", dataclasses.replace(ME, pid=os.getpid()))  # this test's process: alive
    await register(store, "container", dataclasses.replace(ME, pid=NO_SUCH_PID, pid_ns="pid:[1]"))
    await register(store, "before-reboot", dataclasses.replace(
        ME, pid=NO_SUCH_PID, boot_id="00000000-0000-0000-0000-000000000001"))
    # default rescue delay (smtp send timeout + 15 s = 75 s) and interval (15 s)
    r = await running()
    rows = await r.final("killed", timeout=10)
    assert rows["killed"]["status"] == "sent"
    await anyio.sleep(1)
    others = {row["dedupe_key"]: row["status"] for row in await store.status(workers[1:])}
    assert others == dict.fromkeys(workers[1:], "sending")
    assert smtp_server.received_by_header("Subject") == {"killed": 1}
    # the daemon said who it is, and a clean stop forgets it
    mine = await store.fetch("SELECT worker FROM email_daemon_processes WHERE pid = $1 AND start_ticks = $2",
                             ME.pid, ME.start_ticks)
    assert [m["worker"] for m in mine] == [r.daemon.worker]


async def test_a_restart_under_the_same_worker_name_rescues_the_old_process_but_not_its_own_claims(
        running: Any, store: SqlStore, db_url: str, smtp_server: SmtpTestServer) -> None:
    """The template unit names its worker %H:%i, the same after a restart: the old process's claims
    are rescued, and the new process's own fresh claims under that name are never taken for dead."""
    await claimed_by_gone_sessions(db_url, store, ["old-claim"])
    await store.execute("UPDATE email_deliveries SET claimed_by = 'host:1' WHERE dedupe_key = 'old-claim'")
    await register(store, "host:1", dataclasses.replace(ME, pid=NO_SUCH_PID))
    for i in range(60):
        await insert(store, f"new-{i}", subject=f"new-{i}")
    smtp_server.delay("DATA", 0.05)
    r = await running(worker_name="host:1", concurrency=4, batch_size=4)
    keys = ["old-claim"] + [f"new-{i}" for i in range(60)]
    rows = await r.final(*keys, timeout=30)
    assert {row["status"] for row in rows.values()} == {"sent"}
    received = smtp_server.received_by_header("Subject")
    assert max(received.values()) == 1 and len(received) == 61
    attempts = await store.fetch("SELECT d.dedupe_key, count(*) AS n FROM email_delivery_attempts a "
                                 "JOIN email_deliveries d ON d.id = a.delivery_id GROUP BY 1")
    # the old claim: the rescue's unknown outcome, then the resend; every new row: its one send
    assert {a["dedupe_key"]: a["n"] for a in attempts} == {"old-claim": 2, **{f"new-{i}": 1 for i in range(60)}}


async def test_a_clean_stop_forgets_the_process(start: Any, store: SqlStore) -> None:
    factory, stack = start
    r = await factory()
    with anyio.fail_after(10):
        while not await store.fetch("SELECT 1 FROM email_daemon_processes WHERE pid = $1", ME.pid):
            await anyio.sleep(0.05)
    daemon, tg, transport = stack.pop()
    daemon.stop()
    await tg.__aexit__(None, None, None)
    await transport.aclose()
    assert await store.fetch("SELECT 1 FROM email_daemon_processes WHERE pid = $1", ME.pid) == []
    assert r.daemon is daemon
