"""Debian's real PgBouncer between the daemon and PostgreSQL (store/pooler.py): transaction and
statement mode refused at start-up with exit code 2, session mode works, and applications may
insert through transaction mode."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from outbox_mailer.cli import main
from outbox_mailer.daemon import Daemon
from outbox_mailer.errors import ConfigurationError
from outbox_mailer.store.pooler import session_pooling_problem
from outbox_mailer.transports.smtp import SmtpTransport
from tests.integration.conftest import Running, settings_for
from tests.pgbouncer import running_pgbouncer
from tests.smtp_server import SmtpTestServer

pytestmark = pytest.mark.anyio


@pytest.fixture
def bouncer(db_url: str) -> Iterator[Any]:
    opened: list[Any] = []

    def start(mode: str, pool_size: int = 2) -> str:
        context = running_pgbouncer(db_url, mode, pool_size=pool_size)
        opened.append(context)
        return context.__enter__()

    yield start
    for context in reversed(opened):
        context.__exit__(None, None, None)


@pytest.mark.parametrize(("mode", "pool_size"), [("transaction", 1), ("transaction", 4), ("statement", 2)])
async def test_a_transaction_or_statement_pooler_is_told_apart_from_a_session(
        bouncer: Any, db_url: str, mode: str, pool_size: int) -> None:
    problem = await session_pooling_problem(bouncer(mode, pool_size))
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


def test_run_exits_2_naming_what_to_change(bouncer: Any, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OUTBOX_MAILER_DATABASE_URL", bouncer("transaction", 1))
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
