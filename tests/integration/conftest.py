"""Fixtures and helpers of the integration tests: the CLI in-process, the daemon with its metrics endpoint,
the console signed in as an operator, transports aimed at the fake provider server (``api``) and daemons
sending through them (``daemon``, ``resend``). The daemon sending through SMTP (``running``) is
tests/in_process_daemon.py's, the servers are tests/smtp_server.py's and tests/provider_server.py's."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import anyio
import asyncpg
import pytest
from anyio.abc import TaskStatus

from outbox_mailer.cli import main
from outbox_mailer.daemon.metrics import Metrics
from outbox_mailer.daemon.service import Daemon
from outbox_mailer.settings.config import Settings
from outbox_mailer.settings.transports import ApiTransportSettings
from outbox_mailer.store import Store
from outbox_mailer.transports.api.http import HttpApiTransport
from outbox_mailer.transports.smtp import SmtpTransport
from tests.console_harness import Client, served_console
from tests.in_process_daemon import Running, settings_for
from tests.provider_server import ProviderServer
from tests.smtp_server import SmtpTestServer, free_port


@pytest.fixture
async def own_conn(db_url: str) -> AsyncIterator[asyncpg.Connection]:
    """To the test's own database, where ``running`` runs the daemon."""
    c = await asyncpg.connect(db_url)
    yield c
    await c.close()


async def cli(*args: str) -> int:
    """The CLI's own entry point (``outbox-mailer ARGS``), in a thread: it runs its own event loop."""
    return await anyio.to_thread.run_sync(main, list(args))


async def insert(store: Store, key: str, **cols: Any) -> None:
    row = {"to_addresses": ["to@example.com"], "subject": "hello", "text_body": "body", **cols, "dedupe_key": key}
    assert await store.enqueue(row) is not None


async def abandon_at_shutdown(running: Callable[..., Any], store: Store, smtp_server: SmtpTestServer,
                              key: str) -> Running:
    """A daemon stopped while the send of a new row ``key`` waits for its DATA reply past the grace period:
    the send is cut off and the row left 'sending' for a rescuer (the server's delay stays scripted)."""
    smtp_server.delay("DATA", 1.5)
    await insert(store, key)
    r: Running = await running(shutdown_grace_seconds=0.2)
    await r.wait_for(lambda rows: rows.get(key, {}).get("status") == "sending", [key])
    r.daemon.stop()
    with anyio.fail_after(5):
        while r.daemon.in_flight:
            await anyio.sleep(0.05)
    return r


@dataclass(frozen=True, slots=True)
class MeteredDaemon:
    """A daemon started by :func:`metered_daemon`, with its metrics and where they are served."""

    daemon: Daemon
    metrics: Metrics
    base: str  # the metrics endpoint: http://host:port


@contextlib.asynccontextmanager
async def metered_daemon(settings: Settings) -> AsyncIterator[MeteredDaemon]:
    """A daemon sending through SMTP, its metrics served on ``settings.metrics_address`` (stats every
    0.2 s, snapshots every 0.05 s), from the moment the endpoint listens; on exit the daemon is stopped
    and awaited, then its transport closed."""
    transport = SmtpTransport(settings.smtp)
    try:
        metrics = Metrics(settings, stats_interval_seconds=0.2, snapshot_interval_seconds=0.05)
        daemon = Daemon(settings, {"smtp": transport}, observer=metrics)

        async def run(*, task_status: TaskStatus[tuple[str, int]]) -> None:
            async with metrics.serve(daemon) as address:
                task_status.started(address)
                await daemon.run()

        async with anyio.create_task_group() as tg:
            host, port = await tg.start(run)
            try:
                yield MeteredDaemon(daemon, metrics, f"http://{host}:{port}")
            finally:
                daemon.stop()
    finally:
        await transport.aclose()


@pytest.fixture
async def operator(db_url: str) -> AsyncIterator[Client]:
    """A client signed in as the operator olga, on a console over the test's database (tests/console_harness.py)."""
    async with served_console(db_url) as served:
        client = served.client()
        await client.login("olga")
        yield client
        await client.aclose()


# ---- provider API transports and daemons sending through them -----------------------------

TOKEN = "test"  # the API key the provider server accepts


@pytest.fixture
async def api(provider_server: ProviderServer) -> AsyncIterator[Callable[..., HttpApiTransport]]:
    """api(kind, **settings) -> an HttpApiTransport aimed at the provider server; closed at the end."""
    made: list[HttpApiTransport] = []

    def factory(kind: str = "resend", *, name: str | None = None, auth_pause_seconds: float = 300,
                **settings: Any) -> HttpApiTransport:
        # one request per email: this module is about single sends (batches: test_daemon_batches.py)
        values: dict[str, Any] = {"kind": kind, "timeout_seconds": 5, "batch": False}
        if kind == "http":
            values["url"] = provider_server.hook_url
        else:
            values.update(api_key=TOKEN, base_url=provider_server.base_url)
        values.update(settings)
        transport = HttpApiTransport(ApiTransportSettings(**values), name=name or kind,
                                     auth_pause_seconds=auth_pause_seconds)
        made.append(transport)
        return transport

    yield factory
    for transport in made:
        await transport.aclose()


# The ``running`` fixture builds its Settings without ``transports`` (its own parameter of that name
# takes transport objects), so a daemon there has no rate limit and no configuration for them: ``daemon``
# and ``resend`` start theirs with both.


@pytest.fixture
async def daemon(db_url: str, store: Store) -> AsyncIterator[Callable[..., Any]]:
    """daemon(transports={name: transport}, transport_settings={name: {...}}, **settings) -> Running."""
    stack: list[tuple[Daemon, Any]] = []

    async def factory(transports: dict[str, Any], transport_settings: dict[str, Any],
                      default_transport: str = "smtp", **overrides: Any) -> Running:
        unused_smtp = SimpleNamespace(host="127.0.0.1", port=free_port())
        settings = settings_for(db_url, unused_smtp, transports=transport_settings,
                                default_transport=default_transport, **overrides)
        d = Daemon(settings, transports, default_transport=default_transport)
        tg = anyio.create_task_group()
        await tg.__aenter__()
        tg.start_soon(d.run)
        stack.append((d, tg))
        return Running(d, store)

    yield factory
    for d, tg in reversed(stack):
        d.stop()
        await tg.__aexit__(None, None, None)


@pytest.fixture
async def resend(db_url: str) -> AsyncIterator[Callable[..., Any]]:
    """resend(server, batch=True, **settings) -> a running daemon whose default transport is Resend."""
    running: list[tuple[Daemon, Any, HttpApiTransport]] = []

    async def start(server: ProviderServer, *, batch: bool = True, rate: float | None = None,
                    observer: Metrics | None = None, **overrides: Any) -> Daemon:
        options = {"kind": "resend", "api_key": "test", "base_url": server.base_url, "timeout_seconds": 2,
                   "batch": batch, "rate_per_second": rate or 1000, "burst": 2 if rate else 100}
        transport = HttpApiTransport(ApiTransportSettings(**options), name="resend")
        smtp = {"host": "127.0.0.1", "port": free_port(), "tls": "none", "data_timeout_seconds": 2,
                "send_timeout_seconds": 2}  # unused
        settings = settings_for(db_url, SimpleNamespace(host="127.0.0.1", port=0), smtp=smtp,
                                transports={"resend": options}, default_transport="resend",
                                concurrency=300, **overrides)
        daemon = Daemon(settings, {"resend": transport}, default_transport="resend", observer=observer)
        tg = anyio.create_task_group()
        await tg.__aenter__()
        tg.start_soon(daemon.run)
        running.append((daemon, tg, transport))
        return daemon

    yield start
    for daemon, tg, transport in reversed(running):
        daemon.stop()
        await tg.__aexit__(None, None, None)
        await transport.aclose()
