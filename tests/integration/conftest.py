"""Fixtures for running the daemon (and the CLI) in-process against the test PostgreSQL and SMTP server, with or
without its metrics endpoint."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
from anyio.abc import TaskStatus

from outbox_mailer.cli import main
from outbox_mailer.daemon.metrics import Metrics
from outbox_mailer.daemon.service import Daemon
from outbox_mailer.delivery import Transport
from outbox_mailer.settings.config import Settings
from outbox_mailer.store import Store
from outbox_mailer.transports.smtp import SmtpTransport
from tests.console_harness import Client, served_console
from tests.smtp_server import (
    SmtpTestServer,
    smtp_server,  # noqa: F401  (fixture)
)
from tests.sql_store import SqlStore


def settings_for(db_url: str, server: SmtpTestServer, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": db_url,
        "default_from": "App <app@example.com>",
        "smtp": {"host": server.host, "port": server.port, "tls": "none", "connect_timeout_seconds": 2,
                 "command_timeout_seconds": 2, "data_timeout_seconds": 2},
        "retry": {"base_seconds": 0.05, "max_seconds": 0.2},
        "poll_interval_seconds": 0.5,
        "shutdown_grace_seconds": 5,
    }
    values.update(overrides)
    return Settings(**values)


async def cli(*args: str) -> int:
    """The CLI's own entry point (``outbox-mailer ARGS``), in a thread: it runs its own event loop."""
    return await anyio.to_thread.run_sync(main, list(args))


async def insert(store: Store, key: str, **cols: Any) -> None:
    row = {"to_addresses": ["to@example.com"], "subject": "hello", "text_body": "body", **cols, "dedupe_key": key}
    assert await store.enqueue(row) is not None


class Running:
    def __init__(self, daemon: Daemon, store: Store) -> None:
        self.daemon, self.store = daemon, store

    async def wait_for(self, predicate: Callable[[dict[str, dict[str, Any]]], bool], keys: list[str],
                       timeout: float = 10) -> dict[str, dict[str, Any]]:
        with anyio.fail_after(timeout):
            while True:
                rows = {r["dedupe_key"]: r for r in await self.store.status(keys)}
                if predicate(rows):
                    return rows
                await anyio.sleep(0.05)

    async def final(self, *keys: str, timeout: float = 10) -> dict[str, dict[str, Any]]:
        return await self.wait_for(
            lambda rows: len(rows) == len(keys) and all(r["status"] not in ("pending", "sending")
                                                        for r in rows.values()),
            list(keys), timeout)


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[SqlStore]:
    s = await SqlStore.open(db_url)
    yield s
    await s.close()


@pytest.fixture
def start(db_url: str, store: Store, smtp_server: SmtpTestServer):  # noqa: F811
    """start(**settings) runs a daemon for the test's duration; it is stopped and awaited at the end."""

    async def factory(transports: dict[str, Transport] | None = None, **overrides: Any) -> Running:
        settings = settings_for(db_url, smtp_server, **overrides)
        transport = SmtpTransport(settings.smtp, bounces=settings.bounces.tags(),
                                  per_recipient=settings.bounces.per_recipient)
        daemon = Daemon(settings, {"smtp": transport, **(transports or {})})
        tg = anyio.create_task_group()
        await tg.__aenter__()
        tg.start_soon(daemon.run)
        stack.append((daemon, tg, transport))
        return Running(daemon, store)

    stack: list[Any] = []
    return factory, stack


@pytest.fixture
async def running(start: Any) -> AsyncIterator[Callable[..., Any]]:
    factory, stack = start
    yield factory
    for daemon, tg, transport in reversed(stack):
        daemon.stop()
        await tg.__aexit__(None, None, None)
        await transport.aclose()


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
