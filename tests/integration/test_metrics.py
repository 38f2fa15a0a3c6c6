"""/metrics, /healthz and /readyz: real HTTP to a real server on loopback, the daemon in-process
against the test PostgreSQL and the aiosmtpd test server."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from outbox_mailer.daemon.metrics import Metrics
from outbox_mailer.daemon.service import Daemon
from outbox_mailer.errors import ConfigurationError
from outbox_mailer.settings.config import Settings, load_settings
from outbox_mailer.store import Store
from outbox_mailer.transports.smtp import SmtpTransport
from tests.in_process_daemon import Running, settings_for
from tests.integration.conftest import insert, metered_daemon
from tests.smtp_server import SmtpTestServer, free_port, running_smtp_server

pytestmark = pytest.mark.anyio


class Metered(Running):
    def __init__(self, daemon: Daemon, store: Store, metrics: Metrics, base: str) -> None:
        super().__init__(daemon, store)
        self.metrics, self.base = metrics, base

    async def get(self, path: str) -> httpx.Response:
        async with httpx.AsyncClient(timeout=5) as client:
            return await client.get(self.base + path)

    async def samples(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        response = await self.get("/metrics")
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(response.text) for s in family.samples}

    async def until(self, check: Callable[[], Any], timeout: float = 8) -> Any:
        with anyio.fail_after(timeout):
            while not (result := await check()):
                await anyio.sleep(0.05)
            return result


def value(samples: dict[Any, float], name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


@pytest.fixture
async def metered(db_url: str, store: Store, smtp_server: SmtpTestServer) -> AsyncIterator[Any]:
    """metered(**settings): a daemon with metrics served on a free loopback port, stopped at the end."""
    async with contextlib.AsyncExitStack() as started:

        async def factory(**overrides: Any) -> Metered:
            settings = settings_for(db_url, smtp_server, metrics_address=f"127.0.0.1:{free_port()}", **overrides)
            running = await started.enter_async_context(metered_daemon(settings))
            return Metered(running.daemon, store, running.metrics, running.base)

        yield factory


async def test_outcomes_rows_and_batches_are_counted(
    metered: Any, store: Store, smtp_server: SmtpTestServer
) -> None:
    smtp_server.fail("RCPT", "550 5.1.1 no such user", address="bad@example.com")
    smtp_server.fail("RCPT", "451 4.7.1 greylisted", address="grey@example.com", times=1)
    smtp_server.drop("DATA", times=1)  # the first message body read goes unanswered: ambiguous, resent
    keys = [f"ok{i}" for i in range(5)]
    for key in keys:
        await insert(store, key)
    await insert(store, "grey", to_addresses=["grey@example.com"])
    await insert(store, "bad", to_addresses=["bad@example.com"])
    m = await metered()
    assert (await m.get("/healthz")).status_code in (200, 503)  # answers at once, even before the first turn
    rows = await m.final(*keys, "grey", "bad")
    assert [k for k, r in rows.items() if r["status"] != "sent"] == ["bad"]

    s = await m.samples()
    assert value(s, "outbox_mailer_emails_sent_total", transport="smtp") == 6
    assert value(s, "outbox_mailer_emails_failed_total", transport="smtp") == 1
    assert value(s, "outbox_mailer_retries_total", transport="smtp") == 2  # the 451 and the ambiguous one
    assert value(s, "outbox_mailer_ambiguous_outcomes_total", transport="smtp") == 1
    assert value(s, "outbox_mailer_emails_in_doubt_total", transport="smtp") == 0
    assert value(s, "outbox_mailer_claims_lost_total") == 0
    attempts = (await store.fetch("SELECT count(*) AS n FROM email_delivery_attempts"))[0]["n"]
    assert attempts == 9
    durations = sum(v for (name, _), v in s.items() if name == "outbox_mailer_send_duration_seconds_count")
    assert durations == attempts
    assert value(s, "outbox_mailer_send_duration_seconds_count", transport="smtp", outcome="ambiguous") == 1
    assert value(s, "outbox_mailer_claim_batch_size_count") > 0
    assert value(s, "outbox_mailer_claim_batch_size_sum") >= attempts
    assert value(s, "outbox_mailer_in_flight") == 0
    assert value(s, "outbox_mailer_transport_paused", transport="smtp") == 0
    assert value(s, "outbox_mailer_database_reconnects_total") == 0

    stats = await store.stats()

    async def rows_match() -> bool:
        s = await m.samples()
        return all(value(s, "outbox_mailer_rows", status=st) == stats[st]
                   for st in ("pending", "sending", "sent", "failed", "cancelled", "in_doubt"))

    await m.until(rows_match)
    s = await m.samples()
    assert value(s, "outbox_mailer_rows", status="sent") == 6 and value(s, "outbox_mailer_due_now") == 0
    assert value(s, "outbox_mailer_oldest_due_age_seconds") == 0

    health = await m.get("/healthz")
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    ready = await m.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    assert (await m.get("/nope")).status_code == 404


async def test_readyz_follows_a_transport_pause_and_the_server_is_gone_after_stop(
    metered: Any, store: Store
) -> None:
    port = free_port()  # nothing listens here yet
    m = await metered(smtp={"host": "127.0.0.1", "port": port, "tls": "none", "connect_timeout_seconds": 0.5},
                      pause_base_seconds=1.0, pause_max_seconds=1.0)
    await m.until(lambda: _status(m, "/readyz", 200))  # database answering, nothing paused
    await insert(store, "k")
    body = await m.until(lambda: _status(m, "/readyz", 503))
    assert body["paused_transports"] == ["smtp"] and "transport paused: smtp" in body["reason"]
    assert (await m.get("/healthz")).status_code == 200, "a paused transport is not a dead daemon"
    s = await m.samples()
    assert value(s, "outbox_mailer_transport_paused", transport="smtp") == 1
    assert value(s, "outbox_mailer_transport_pauses_total", transport="smtp") >= 1
    assert value(s, "outbox_mailer_emails_sent_total", transport="smtp") == 0

    with running_smtp_server(port=port):
        assert (await m.final("k", timeout=10))["k"]["status"] == "sent"
        await m.until(lambda: _status(m, "/readyz", 200))
        s = await m.samples()
        assert value(s, "outbox_mailer_emails_sent_total", transport="smtp") == 1
        assert value(s, "outbox_mailer_retries_total", transport="smtp") >= 1  # the unreachable tries

    base = m.base
    m.daemon.stop()
    with anyio.fail_after(10):
        while not m.daemon._stopping.is_set() or m.metrics.serving:
            await anyio.sleep(0.05)
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient(timeout=2) as client:
            await client.get(base + "/healthz")


async def _status(m: Metered, path: str, code: int) -> dict[str, Any] | None:
    response = await m.get(path)
    return response.json() if response.status_code == code else None


async def test_a_taken_port_fails_at_start_up(db_url: str, smtp_server: SmtpTestServer) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = settings_for(db_url, smtp_server, metrics_address=f"127.0.0.1:{port}")
        metrics = Metrics(settings)
        daemon = Daemon(settings, {"smtp": SmtpTransport(settings.smtp)}, observer=metrics)
        with pytest.raises(ConfigurationError, match=f"127.0.0.1:{port}: cannot listen there"):
            async with metrics.serve(daemon):
                pytest.fail("must not get here")

        env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_MAILER_")}
        env |= {"OUTBOX_MAILER_DATABASE_URL": db_url, "OUTBOX_MAILER_METRICS_ADDRESS": f"127.0.0.1:{port}",
                "OUTBOX_MAILER_SMTP__HOST": "127.0.0.1", "OUTBOX_MAILER_SMTP__TLS": "none"}
        done = await anyio.to_thread.run_sync(lambda: subprocess.run(
            [sys.executable, "-m", "outbox_mailer", "run"], check=False, env=env, capture_output=True, text=True, timeout=30))
        assert done.returncode == 2, done.stderr
        assert "cannot listen there" in done.stderr


@pytest.mark.parametrize("address", ["127.0.0.1", ":9464", "host:0", "host:65536", "host:x", "::1:9464",
                                     "[::1:9464", "a b:80"])
def test_metrics_address_is_validated(address: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTBOX_MAILER_METRICS_ADDRESS", address)
    with pytest.raises(ConfigurationError, match="OUTBOX_MAILER_METRICS_ADDRESS"):
        load_settings()


@pytest.mark.parametrize("address", ["127.0.0.1:9464", "[::1]:9464", "0.0.0.0:1", "localhost:65535"])
def test_metrics_address_accepts(address: str) -> None:
    assert Settings(metrics_address=address).metrics_address == address
    assert Settings().metrics_address is None
