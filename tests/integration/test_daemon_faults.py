"""Faults the daemon must survive, in-process: an unreachable mail server, a
poison row, a PostgreSQL restart."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from outbox_mailer.daemon.service import Daemon
from outbox_mailer.delivery import ComposedMessage, Delivery, Outcome
from outbox_mailer.devtools.pgcluster import TemporaryPostgres
from outbox_mailer.devtools.sink import SmtpSink
from outbox_mailer.settings.config import Settings
from outbox_mailer.store import Store
from outbox_mailer.store.migrations import load_migrations
from outbox_mailer.transports.smtp import SmtpTransport
from tests.integration.conftest import insert
from tests.smtp_server import SmtpTestServer, free_port
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio


async def test_unreachable_server_pauses_the_transport_without_charging_attempts(
    running: Any, store: Store, smtp_server: SmtpTestServer
) -> None:
    port = free_port()  # nothing listens here yet
    for i in range(5):
        await insert(store, f"k{i}", max_attempts=1)
    r = await running(smtp={"host": "127.0.0.1", "port": port, "tls": "none", "connect_timeout_seconds": 0.5},
                      retry={"base_seconds": 0.05, "max_seconds": 0.1}, pause_max_seconds=0.5)
    await r.wait_for(lambda rows: sum(1 for x in rows.values() if x["last_error"]) == 5, [f"k{i}" for i in range(5)])
    assert r.daemon.gates["smtp"].breaker.failures >= 1
    rows = {x["dedupe_key"]: x for x in await store.status([f"k{i}" for i in range(5)])}
    assert all(x["status"] in ("pending", "sending") for x in rows.values()), "an outage must not fail rows"
    async with SmtpSink(port=port) as sink:
        rows = await r.final(*[f"k{i}" for i in range(5)], timeout=20)
        assert {x["status"] for x in rows.values()} == {"sent"}
        assert {x["attempts"] for x in rows.values()} == {1}, "attempts that never reached a server are refunded"
        assert len(sink.messages) == 5
    attempts = await store.attempts(rows["k0"]["id"])
    assert attempts[-1]["outcome"] == "sent" and any(a["outcome"] == "transient" for a in attempts)


class ExplodingTransport:
    """A transport with a bug for one row: raises instead of returning an Outcome."""

    name = "exploding"
    max_parallel = 4
    send_timeout_seconds = 5.0
    idempotency_window_seconds = None

    async def send(self, message: ComposedMessage, delivery: Delivery) -> Outcome:
        if delivery.dedupe_key == "poison":
            raise RuntimeError("bug in a transport")
        return Outcome.sent("ok-1")

    async def check(self) -> str:
        return "ok"

    async def aclose(self) -> None:
        pass


async def test_a_poison_row_fails_alone_and_the_daemon_goes_on(running: Any, store: Store) -> None:
    await insert(store, "poison", transport="exploding")
    await insert(store, "fine", transport="exploding")
    r = await running(transports={"exploding": ExplodingTransport()})
    rows = await r.final("poison", "fine")
    assert rows["poison"]["status"] == "failed" and "RuntimeError: bug in a transport" in rows["poison"]["last_error"]
    assert rows["fine"]["status"] == "sent"
    await insert(store, "after")
    assert (await r.final("after"))["after"]["status"] == "sent"


async def test_daemon_survives_a_postgresql_restart(smtp_server: SmtpTestServer) -> None:
    smtp_server.delay("DATA", 0.02)
    with TemporaryPostgres() as pg:
        store = await SqlStore.open(pg.url)
        await store.migrate(load_migrations())
        await store.execute(
            "INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body) "
            "SELECT 'r' || g, ARRAY['a@example.com'], 's', 'b' FROM generate_series(1, 400) g"
        )
        await store.close()
        settings = Settings(database_url=pg.url, default_from="app@example.com", poll_interval_seconds=0.5,
                            smtp={"host": smtp_server.host, "port": smtp_server.port, "tls": "none"})
        smtp = SmtpTransport(settings.smtp)
        daemon = Daemon(settings, {"smtp": smtp})
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            with anyio.fail_after(10):
                while len(smtp_server.accepted) < 50:
                    await anyio.sleep(0.02)
            await anyio.to_thread.run_sync(pg.restart, 1.5)
            store = await SqlStore.open(pg.url)
            try:
                with anyio.fail_after(30):
                    while (stats := await store.stats())["sent"] < 400:
                        await anyio.sleep(0.1)
            finally:
                await store.close()
            daemon.stop()
        await smtp.aclose()
    assert stats["sending"] == 0 and stats["pending"] == 0
    assert daemon.reconnects >= 1
