"""The daemon run in-process against the test's PostgreSQL and SMTP server: ``settings_for`` (its
Settings), ``Running`` (waiting for rows to settle) and the fixtures ``store``, ``start`` and ``running``
(a daemon per call, stopped at the end of the test). Loaded as a plugin by tests/conftest.py: the
integration and browser tests use these fixtures."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import pytest

from outbox_mailer.daemon.service import Daemon
from outbox_mailer.delivery import Transport
from outbox_mailer.settings.config import Settings
from outbox_mailer.store import Store
from outbox_mailer.transports.smtp import SmtpTransport
from tests.smtp_server import SmtpTestServer
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
def start(db_url: str, store: Store, smtp_server: SmtpTestServer) -> tuple[Callable[..., Any], list[Any]]:
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
