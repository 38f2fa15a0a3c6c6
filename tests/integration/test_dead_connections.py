"""Connections that go silent: open, ACKed by TCP, but nothing answering (a NAT or firewall
that lost its state). The daemon reaches PostgreSQL through tests/stalling_proxy.py; stalling
it silences every connection open at that moment while new ones pass. The daemon must notice
within a bounded time, reconnect, and send nothing twice; the silent sessions' server sides
must end by themselves and free their advisory locks. The start-up pooler check gives up on a
silent connection within its timeout, and a slow reopening of the LISTEN session does not hold
up the claim session's heartbeat.
"""

from __future__ import annotations

import itertools
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import pytest

from outbox_mailer.daemon.sessions import DaemonSessions
from outbox_mailer.errors import DatabaseUnavailable
from outbox_mailer.store import ClaimSession, Listener, SessionLimits, Store, pooler
from tests.smtp_server import SmtpTestServer
from tests.sql_store import SqlStore
from tests.stalling_proxy import StallingProxy

pytestmark = pytest.mark.anyio

TIMEOUT = 2.0  # DATABASE_TIMEOUT_SECONDS in these tests: pings every 0.67 s, the server ends silent sessions after 4 s


def through(url: str, *ports: int) -> str:
    """The URL with its host replaced by loopback ports, tried in order (connect_each_host)."""
    parts = urlsplit(url)
    userinfo, _, _ = parts.netloc.rpartition("@")
    hosts = ",".join(f"127.0.0.1:{port}" for port in ports)
    return urlunsplit(parts._replace(netloc=f"{userinfo}@{hosts}" if userinfo else hosts))


async def daemon_backends(store: Store) -> set[int]:
    rows = await store.fetch("SELECT pid FROM pg_stat_activity WHERE application_name = 'outbox-mailer' "
                             "AND pid <> pg_backend_pid()")
    return {r["pid"] for r in rows}


async def wait_for(predicate: Any, timeout: float, what: str) -> float:
    """Poll until ``predicate()`` (async) holds; returns the seconds it took."""
    started = time.monotonic()
    with anyio.fail_after(timeout):
        while not await predicate():
            await anyio.sleep(0.05)
    took = time.monotonic() - started
    print(f"{what}: {took:.2f} s")
    return took


async def test_the_daemon_sessions_carry_the_server_side_limits(db_url: str) -> None:
    limits = SessionLimits(30)
    claim = await ClaimSession.open(db_url, limits=limits)
    listener = await Listener.open(db_url, lambda: None, limits=limits)
    store = await SqlStore.open(db_url, max_size=1, limits=limits)
    plain = await SqlStore.open(db_url, max_size=1)
    try:
        show = ("SELECT current_setting('statement_timeout') AS st, current_setting('lock_timeout') AS lt, "
                "current_setting('idle_in_transaction_session_timeout') AS it, "
                "current_setting('idle_session_timeout') AS idle, current_setting('tcp_keepalives_idle') AS ka")
        for conn in (claim._conn, listener._conn):
            row = await conn.fetchrow(show)
            assert (row["st"], row["lt"], row["it"], row["idle"], row["ka"]) == ("30s", "10s", "1min", "1min", "15")
        await store.fetch("SELECT 1")  # a release runs RESET ALL: the limits must come back at each acquire
        pooled = (await store.fetch(show))[0]
        assert (pooled["st"], pooled["idle"]) == ("30s", "0")  # a pool nobody pings is never ended for idling
        assert (await plain.fetch(show))[0]["st"] == "0"  # migrate's statements may take long
    finally:
        await claim.close()
        await listener.close()
        await store.close()
        await plain.close()


async def test_a_statement_stuck_on_a_silent_connection_fails_as_unavailable(db_url: str) -> None:
    with StallingProxy("127.0.0.1", urlsplit(db_url).port or 5432) as proxy:
        session = await ClaimSession.open(through(db_url, proxy.port), limits=SessionLimits(TIMEOUT))
        try:
            assert proxy.stall() == 1
            started = time.monotonic()
            with pytest.raises(Exception) as caught:
                await session.count_pending()
            took = time.monotonic() - started
        finally:
            await session.close()
    assert type(caught.value).__name__ == "DatabaseUnavailable", caught.value
    assert TIMEOUT <= took < SessionLimits(TIMEOUT).command_timeout + 2, took


async def test_the_pooler_check_on_a_silent_connection_fails_as_unavailable_within_its_timeout(
        db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with StallingProxy("127.0.0.1", urlsplit(db_url).port or 5432) as proxy:
        connect = pooler.connect_each_host

        async def connect_then_go_silent(*args: Any, **kwargs: Any) -> Any:
            conn = await connect(*args, **kwargs)
            proxy.stall()
            return conn

        monkeypatch.setattr(pooler, "connect_each_host", connect_then_go_silent)
        started = time.monotonic()
        with anyio.fail_after(10), pytest.raises(DatabaseUnavailable, match="no answer within 1 s"):
            await pooler.session_pooling_problem(through(db_url, proxy.port), timeout=1)
        took = time.monotonic() - started
    assert 1 <= took < 3, took


@pytest.mark.alone  # a rate or timing bound: no other test meanwhile (tests/conftest.py)
async def test_a_slow_listen_reconnect_does_not_delay_the_claim_sessions_pings(
        db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The LISTEN session goes silent, and its reconnect finds the first host silent too: a whole
    connect timeout (10 s) there, far past the server's idle_session_timeout (2 x TIMEOUT). The claim
    session's heartbeat goes on every TIMEOUT/3 meanwhile, so the server keeps it and nothing reconnects it."""
    limits = SessionLimits(TIMEOUT)
    pings: list[float] = []
    ping = ClaimSession.ping

    async def timed_ping(self: ClaimSession, timeout: float) -> None:
        pings.append(time.monotonic())
        await ping(self, timeout)

    monkeypatch.setattr(ClaimSession, "ping", timed_ping)
    relistening = anyio.Event()  # a lost LISTEN session reopened calls on_notify (nothing else notifies here)
    pg_port = urlsplit(db_url).port or 5432
    with StallingProxy("127.0.0.1", pg_port) as proxy:
        sessions = DaemonSessions(through(db_url, proxy.port, pg_port), on_notify=relistening.set,
                                  held_keys=lambda: (), stopping=anyio.Event(), limits=limits)
        try:
            claim = await sessions.claim_session()
            await sessions.ensure_listening()
            assert proxy.accepted == 2  # both through the proxy, the first host, while it forwards
            async with anyio.create_task_group() as tg:
                tg.start_soon(sessions.keep_alive)
                await anyio.sleep(2 * limits.heartbeat)
                proxy.hold_new()  # the first host stops answering new connections
                assert proxy.stall(newest=1) == 1  # and the LISTEN session's (the claim session's goes on)
                stalled = time.monotonic()
                with anyio.fail_after(30):
                    await relistening.wait()
                relistened = time.monotonic()
                tg.cancel_scope.cancel()
            assert await sessions.claim_session() is claim and await claim.count_pending() == 0
        finally:
            await sessions.close()
    during = [t for t in pings if stalled <= t <= relistened]
    gaps = [b - a for a, b in itertools.pairwise(pings) if b >= stalled and a <= relistened]
    print(f"LISTEN session reopened after {relistened - stalled:.2f} s; meanwhile {len(during)} claim session "
          f"pings, at most {max(gaps):.2f} s apart")
    assert relistened - stalled > 2 * TIMEOUT
    assert len(during) >= (relistened - stalled) / limits.heartbeat - 3, (len(during), relistened - stalled)
    assert max(gaps) < TIMEOUT, gaps
    assert sessions.reconnects == 0


async def test_a_silent_connection_is_replaced_and_nothing_is_sent_twice(
        running: Any, store: Store, db_url: str, smtp_server: SmtpTestServer) -> None:
    smtp_server.delay("DATA", 0.05)
    await store.execute(
        "INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body) "
        "SELECT 'dead-' || g, ARRAY['a@example.com'], 'dead-' || g, 'b' FROM generate_series(1, 150) g")
    with StallingProxy("127.0.0.1", urlsplit(db_url).port or 5432) as proxy:
        # The stall may catch a claim whose rows the server committed but whose reply it lost: those rows
        # are this worker's, 'sending', in nobody's InFlight, and only the rescuer settles them, once the
        # rescue delay has passed (by default the send timeout + 15 s: 75 s). A send timeout of 3 s puts it
        # at 4.5 s, as in tests/e2e/chaos.py, so such rows are sent (once) within this test's deadlines.
        smtp = {"host": smtp_server.host, "port": smtp_server.port, "tls": "none", "connect_timeout_seconds": 2,
                "command_timeout_seconds": 2, "data_timeout_seconds": 2, "send_timeout_seconds": 3}
        daemon = (await running(database_url=through(db_url, proxy.port), database_timeout_seconds=TIMEOUT,
                                concurrency=4, batch_size=10, smtp=smtp, rescue_after_seconds=4.5,
                                rescue_interval_seconds=0.5)).daemon
        with anyio.fail_after(20):
            while len(smtp_server.accepted) < 20:
                await anyio.sleep(0.02)
        silent = await daemon_backends(store)
        assert proxy.stall() >= 2  # the claim session and the LISTEN session at least

        async def reconnected() -> bool:
            return daemon.reconnects >= 1

        await wait_for(reconnected, 30, "silent claim session noticed and replaced")

        async def all_sent() -> bool:
            return (await store.stats())["sent"] == 150

        await wait_for(all_sent, 60, "all 150 rows sent after the stall")

        async def silent_ended() -> bool:  # idle_session_timeout: 2 x DATABASE_TIMEOUT_SECONDS
            return not (await daemon_backends(store)) & silent

        await wait_for(silent_ended, 30, "the silent sessions' server sides ended by the server")
        locks = await store.fetch("SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND pid = ANY($1)",
                                  sorted(silent))
        assert locks[0]["n"] == 0
    received = smtp_server.received_by_header("Subject", accepted_only=True)
    assert len(received) == 150
    assert max(received.values()) == 1, [s for s, n in received.items() if n > 1]


async def test_an_idle_daemon_replaces_its_silent_listen_session(
        running: Any, store: Store, db_url: str, smtp_server: SmtpTestServer) -> None:
    """Nothing to claim and a poll interval of a minute: only a LISTEN session that works again can
    bring the next row out quickly, so the heartbeat must have found the silent one and reopened it."""
    with StallingProxy("127.0.0.1", urlsplit(db_url).port or 5432) as proxy:
        await running(database_url=through(db_url, proxy.port), database_timeout_seconds=TIMEOUT,
                      poll_interval_seconds=60)
        await anyio.sleep(0.5)  # started, idle
        opened = proxy.accepted
        assert proxy.stall() >= 2

        async def reopened() -> bool:  # the claim session and the LISTEN session came back
            return proxy.accepted >= opened + 2

        await wait_for(reopened, 20, "idle sessions noticed and reopened")
        await store.execute("INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body) "
                            "VALUES ('after-stall', ARRAY['a@example.com'], 'after-stall', 'b')")

        async def sent() -> bool:
            return (await store.status(["after-stall"]))[0]["status"] == "sent"

        await wait_for(sent, 10, "a row inserted after the stall sent")
    assert smtp_server.received_by_header("Subject")["after-stall"] == 1

