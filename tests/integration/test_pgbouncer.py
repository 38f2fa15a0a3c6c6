"""Debian's real PgBouncer between the daemon and PostgreSQL (store/pooler.py): transaction and
statement mode refused at start-up with exit code 2, whichever server connection PgBouncer hands
out next (the one released last, or with ``server_round_robin = 1`` the one idle longest), session
mode works, and applications may insert through transaction mode."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Mapping
from typing import Any

import anyio
import asyncpg
import pytest

from outbox_mailer.cli import main
from outbox_mailer.daemon.service import Daemon
from outbox_mailer.errors import ConfigurationError
from outbox_mailer.store.pooler import session_pooling_problem
from outbox_mailer.transports.smtp import SmtpTransport
from tests.in_process_daemon import Running, settings_for
from tests.pgbouncer import running_pgbouncer
from tests.smtp_server import SmtpTestServer

pytestmark = pytest.mark.anyio


@pytest.fixture
def bouncer(db_url: str) -> Iterator[Any]:
    opened: list[Any] = []

    def start(mode: str, pool_size: int = 2, settings: Mapping[str, str] | None = None) -> str:
        context = running_pgbouncer(db_url, mode, pool_size=pool_size, settings=settings)
        opened.append(context)
        return context.__enter__()

    yield start
    for context in reversed(opened):
        context.__exit__(None, None, None)


ROUND_ROBIN = {"server_round_robin": "1"}


async def warm(url: str, servers: int) -> None:
    """Leave ``servers`` server connections idle in the pool: as many clients, each running a statement
    at the same time (so each holds a server connection of its own), then all gone."""
    clients = [await asyncpg.connect(url, statement_cache_size=0) for _ in range(servers)]
    try:
        pids: set[int] = set()
        async with anyio.create_task_group() as tg:
            for client in clients:
                tg.start_soon(lambda c: _pid_after_a_while(c, pids), client)
        assert len(pids) == servers, pids
    finally:
        for client in clients:
            await client.close()


async def _pid_after_a_while(client: asyncpg.Connection, pids: set[int]) -> None:
    pids.add(await client.fetchval("SELECT pg_backend_pid() FROM pg_sleep(0.3)"))


@pytest.mark.parametrize(("mode", "pool_size", "settings", "warm_servers"), [
    ("transaction", 1, None, 1), ("transaction", 4, None, 2), ("transaction", 4, ROUND_ROBIN, 2),
    ("transaction", 4, ROUND_ROBIN, 3), ("statement", 2, None, 2), ("statement", 2, ROUND_ROBIN, 2)])
async def test_a_transaction_or_statement_pooler_is_told_apart_from_a_session(
        bouncer: Any, db_url: str, mode: str, pool_size: int, settings: Mapping[str, str] | None,
        warm_servers: int) -> None:
    url = bouncer(mode, pool_size, settings)
    await warm(url, warm_servers)
    problem = await session_pooling_problem(url)
    assert problem is not None and "pool_mode = session" in problem, problem
    assert await session_pooling_problem(bouncer("session")) is None
    assert await session_pooling_problem(db_url) is None


async def test_the_daemon_refuses_to_start_behind_transaction_mode(
        bouncer: Any, smtp_server: SmtpTestServer) -> None:
    url = bouncer("transaction", 1)
    settings = settings_for(url, smtp_server)
    daemon = Daemon(settings, {"smtp": SmtpTransport(settings.smtp)})
    with pytest.raises(ConfigurationError) as exc:
        await daemon.run()
    assert exc.value.setting == "OUTBOX_MAILER_DATABASE_URL"
    assert "two connections were served by one server process" in str(exc.value)


@pytest.mark.parametrize(("pool_size", "settings", "warm_servers"), [(1, None, 1), (4, ROUND_ROBIN, 2)])
def test_run_exits_2_naming_what_to_change(bouncer: Any, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str], pool_size: int,
                                           settings: Mapping[str, str] | None, warm_servers: int) -> None:
    url = bouncer("transaction", pool_size, settings)
    anyio.run(warm, url, warm_servers)
    monkeypatch.setenv("OUTBOX_MAILER_DATABASE_URL", url)
    monkeypatch.setenv("OUTBOX_MAILER_SMTP__TLS", "none")
    assert main(["run"]) == 2
    err = capsys.readouterr().err
    assert "transaction- or statement-mode pooler" in err and "pool_mode = session" in err


async def test_behind_session_mode_the_daemon_sends_what_an_app_inserted_through_transaction_mode(
        bouncer: Any, store: Any, smtp_server: SmtpTestServer) -> None:
    session, transaction = bouncer("session"), bouncer("transaction", 1)
    subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", transaction, "-c",
                    "INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body) "
                    "VALUES ('via-bouncer', ARRAY['to@example.com'], 'hello', 'body')"],
                   check=True, capture_output=True, timeout=60)
    settings = settings_for(session, smtp_server)
    transport = SmtpTransport(settings.smtp)
    daemon = Daemon(settings, {"smtp": transport})
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.run)
        try:
            [row] = (await Running(daemon, store).final("via-bouncer")).values()
        finally:
            daemon.stop()
    await transport.aclose()
    assert row["status"] == "sent"
    assert len(smtp_server.accepted) == 1
