"""Operators pause a transport (`outbox-mailer pause` / `resume`, the console's overview), against two real
daemons on one database and a real SMTP server: no row is claimed while it is paused, every row is sent
after the resume or the pause's end, a circuit breaker's pause is published to the same table and an
operator's resume closes it, and every change is a row of email_operator_actions."""

from __future__ import annotations

import functools
import getpass
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import pytest

from outbox_mailer.daemon.service import Daemon
from tests.console_harness import served_console
from tests.in_process_daemon import Running
from tests.integration.conftest import cli, insert
from tests.smtp_server import SmtpTestServer
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio


async def until(condition: Callable[[], bool], timeout: float = 10) -> None:
    with anyio.fail_after(timeout):
        while not condition():
            await anyio.sleep(0.02)


def reports_paused(daemon: Daemon, transport: str = "smtp") -> bool:
    paused = daemon.health()["paused_transports"]
    return isinstance(paused, list) and transport in paused


async def loops_turned(daemons: Sequence[Daemon], times: int = 2) -> None:
    """Each daemon's claim loop began ``times`` more turns from now (each turn would claim a due row of an
    open transport)."""
    for _ in range(times):
        await until(functools.partial(all_turned_since, daemons, anyio.current_time()))


def all_turned_since(daemons: Sequence[Daemon], mark: float) -> bool:
    return all(d.liveness.last_turn > mark for d in daemons)


async def pause_rows(store: SqlStore) -> list[dict[str, Any]]:
    return await store.fetch("SELECT transport, source, paused_by, reason, paused_until > now() + interval '200 s'"
                             " AS long FROM email_transport_pauses ORDER BY transport, source")


async def transport_actions(store: SqlStore) -> list[tuple[str, str, str]]:
    rows = await store.fetch("SELECT actor, action, transport FROM email_operator_actions "
                             "WHERE transport IS NOT NULL ORDER BY id")
    return [(r["actor"], r["action"], r["transport"]) for r in rows]


async def test_a_paused_transport_sends_nothing_from_either_daemon_until_it_is_resumed(
        running: Any, store: SqlStore, smtp_server: SmtpTestServer, db_url: str,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OUTBOX_MAILER_DATABASE_URL", db_url)
    runs: list[Running] = [await running(), await running()]
    daemons = [r.daemon for r in runs]
    assert await cli("pause", "smtp", "--reason", "relay maintenance") == 0
    assert capsys.readouterr().out == "paused smtp until resumed: relay maintenance\n"
    await until(lambda: all(reports_paused(d) for d in daemons))

    keys = [f"held-{i}" for i in range(6)]
    for key in keys:
        await insert(store, key)
    await loops_turned(daemons)
    rows = await store.status(keys)
    assert [(r["status"], r["attempts"]) for r in rows] == [("pending", 0)] * len(keys), "no row was claimed"
    assert smtp_server.messages == []

    assert await cli("resume", "smtp") == 0
    assert capsys.readouterr().out == "resumed smtp (lifted the pause of: operator)\n"
    done = await runs[0].final(*keys)
    assert {r["status"] for r in done.values()} == {"sent"} and len(smtp_server.accepted) == len(keys)
    assert not any(reports_paused(d) for d in daemons)
    assert await pause_rows(store) == []
    me = f"cli:{getpass.getuser()}"
    assert await transport_actions(store) == [(me, "pause", "smtp"), (me, "resume", "smtp")]


async def test_a_pause_for_a_duration_ends_by_itself_and_nothing_is_sent_before_its_end(
        running: Any, store: SqlStore, smtp_server: SmtpTestServer, db_url: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTBOX_MAILER_DATABASE_URL", db_url)
    runs: list[Running] = [await running(), await running()]
    assert await cli("pause", "smtp", "--for", "3s") == 0
    [paused] = await store.fetch("SELECT paused_until FROM email_transport_pauses WHERE source = 'operator'")
    await until(lambda: all(reports_paused(r.daemon) for r in runs))
    keys = ["later-1", "later-2"]
    for key in keys:
        await insert(store, key)
    done = await runs[0].final(*keys)
    assert {r["status"] for r in done.values()} == {"sent"}
    starts = await store.fetch("SELECT started_at FROM email_delivery_attempts")
    assert len(starts) == 2 and all(a["started_at"] >= paused["paused_until"] for a in starts)
    assert await cli("resume", "smtp") == 1, "an ended pause is not in force: nothing to resume"


async def test_a_circuit_breakers_pause_is_published_and_an_operators_resume_closes_it(
        running: Any, store: SqlStore, smtp_server: SmtpTestServer, db_url: str,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OUTBOX_MAILER_DATABASE_URL", db_url)
    smtp_server.stop()  # its port refuses connections: unreachable
    run = await running(pause_base_seconds=300, pause_max_seconds=300)
    await insert(store, "blocked")
    await until(lambda: reports_paused(run.daemon))
    with anyio.fail_after(5):
        while not (rows := await pause_rows(store)):
            await anyio.sleep(0.05)
    assert rows == [{"transport": "smtp", "source": "breaker", "paused_by": f"breaker:{run.daemon.worker}",
                     "reason": rows[0]["reason"], "long": True}]
    assert rows[0]["reason"].startswith("unreachable: ")

    smtp_server.start()
    assert await cli("resume", "smtp") == 0
    assert capsys.readouterr().out == "resumed smtp (lifted the pause of: breaker)\n"
    await until(lambda: not reports_paused(run.daemon))
    await insert(store, "after-resume")
    done = await run.final("after-resume")  # long before the breaker's 300 s pause would end
    assert done["after-resume"]["status"] == "sent" and len(smtp_server.accepted) == 1
    blocked = (await store.status(["blocked"]))[0]
    assert (blocked["status"], blocked["attempts"]) == ("pending", 0), "due at the end of the pause it met"
    assert await pause_rows(store) == []


async def test_the_cli_refuses_an_unknown_transport_and_a_bad_duration(
        store: SqlStore, db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OUTBOX_MAILER_DATABASE_URL", db_url)
    assert await cli("pause", "mailgun") == 2
    assert capsys.readouterr().err == "outbox-mailer: no transport named 'mailgun'; the configured ones: smtp\n"
    assert await cli("resume", "mailgun") == 2
    assert await cli("pause", "smtp", "--for", "0s") == 2
    with pytest.raises(SystemExit) as refused:
        await cli("pause", "smtp", "--for", "soon")
    assert refused.value.code == 2 and "is not a duration" in capsys.readouterr().err
    assert await cli("resume", "smtp") == 1
    assert capsys.readouterr().err == "outbox-mailer: transport smtp is not paused\n"
    assert await pause_rows(store) == [] and await transport_actions(store) == []


async def test_the_console_shows_pauses_and_lets_an_operator_pause_and_resume(db_url: str, store: SqlStore) -> None:
    await store.pause_transport("smtp", "cli:ops", "relay maintenance", None)
    await store.execute("INSERT INTO email_transport_pauses (transport, source, paused_by, reason, paused_until) "
                        "VALUES ('resend', 'breaker', 'breaker:host:1', 'unreachable: refused', "
                        "now() + interval '1 minute')")
    async with served_console(db_url, transports={"resend": {"kind": "resend", "api_key": "k"}}) as served:
        viewer, operator = served.client(), served.client()
        await viewer.login("victor")
        await operator.login("olga")
        page = (await viewer.get("/")).text
        assert "relay maintenance" in page and "cli:ops" in page and "until resumed" in page
        assert "breaker:host:1" in page and "unreachable: refused" in page
        assert 'action="/transports/resume"' not in page, "a viewer gets no buttons"
        assert (await viewer.post("/transports/resume", {"transport": "smtp"})).status_code == 403
        assert (await viewer.post("/transports/pause", {"transport": "resend"})).status_code == 403

        page = (await operator.get("/")).text
        assert 'action="/transports/resume"' in page and 'action="/transports/pause"' in page
        assert (await operator.post("/transports/pause", {"transport": "ses"})).status_code == 404
        assert (await operator.post("/transports/pause", {"transport": "resend", "minutes": "soon"})).status_code \
            == 400
        assert (await operator.post("/transports/resume", {"transport": "smtp"}, csrf=False)).status_code == 403
        assert (await operator.post("/transports/resume", {"transport": "smtp"})).status_code == 303
        assert (await operator.post("/transports/pause", {"transport": "resend", "minutes": "30",
                                                          "reason": "bounces"})).status_code == 303
        assert (await operator.post("/transports/resume", {"transport": "smtp"})).status_code == 404
    rows = await store.fetch("SELECT transport, source, paused_by, reason, paused_until > now() + interval '29 min' "
                             "AS for_30_minutes FROM email_transport_pauses ORDER BY source DESC")
    assert rows == [{"transport": "resend", "source": "operator", "paused_by": "olga", "reason": "bounces",
                     "for_30_minutes": True},
                    {"transport": "resend", "source": "breaker", "paused_by": "breaker:host:1",
                     "reason": "unreachable: refused", "for_30_minutes": False}]
    assert await transport_actions(store) == [("cli:ops", "pause", "smtp"), ("olga", "resume", "smtp"),
                                              ("olga", "pause", "resend")]
