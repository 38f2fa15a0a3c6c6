"""Failover between two real SMTP servers: a row moves to the fallback only when the primary
provably did not take it, and new rows use the primary again once it is back."""

from __future__ import annotations

import dataclasses
import email
import email.policy
from collections.abc import AsyncIterator, Callable, Iterator
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from outbox_mailer.daemon.service import Daemon
from outbox_mailer.delivery import OutcomeKind, Status
from outbox_mailer.settings.transports import ApiTransportSettings
from outbox_mailer.store import ClaimSession, Store
from outbox_mailer.transports.api.http import HttpApiTransport
from outbox_mailer.transports.smtp import SmtpTransport
from tests.in_process_daemon import Running, settings_for
from tests.integration.conftest import insert
from tests.integration.test_store import write_for
from tests.provider_server import ProviderServer
from tests.smtp_server import SmtpTestServer, free_port, running_smtp_server

pytestmark = pytest.mark.anyio


@pytest.fixture
def backup() -> Iterator[SmtpTestServer]:
    with running_smtp_server() as server:
        yield server


@pytest.fixture
async def failover(db_url: str, store: Store, smtp_server: SmtpTestServer,
                   backup: SmtpTestServer) -> AsyncIterator[Callable[..., Any]]:
    """failover(backup_options, **settings): a daemon whose smtp transport (the test's smtp_server)
    falls back to "backup", a second SMTP server (``backup_options``: more of its settings)."""
    started: list[tuple[Daemon, Any, list[SmtpTransport]]] = []

    async def start(backup_options: dict[str, Any] | None = None, **overrides: Any) -> Running:
        backup_settings = {"kind": "smtp", "host": backup.host, "port": backup.port, "tls": "none",
                           "connect_timeout_seconds": 2, "command_timeout_seconds": 2, "data_timeout_seconds": 2,
                           **(backup_options or {})}
        settings = settings_for(db_url, smtp_server, transports={"backup": backup_settings},
                                pause_base_seconds=0.3, pause_max_seconds=0.3, **overrides)
        settings.smtp.fallback = "backup"  # type: ignore[misc]
        transports = [SmtpTransport(settings.smtp), SmtpTransport(settings.transports["backup"])]  # type: ignore[arg-type]
        daemon = Daemon(settings, {"smtp": transports[0], "backup": transports[1]})
        tg = anyio.create_task_group()
        await tg.__aenter__()
        tg.start_soon(daemon.run)
        started.append((daemon, tg, transports))
        return Running(daemon, store)

    yield start
    for daemon, tg, transports in reversed(started):
        daemon.stop()
        await tg.__aexit__(None, None, None)
        for transport in transports:
            await transport.aclose()


async def attempts(store: Store, row_id: int) -> list[tuple[str, str]]:
    return [(a["transport"], a["outcome"]) for a in await store.attempts(row_id)]


async def test_with_the_primary_down_every_row_goes_out_once_through_the_fallback(
        failover: Any, store: Store, smtp_server: SmtpTestServer, backup: SmtpTestServer) -> None:
    smtp_server.stop()  # the port refuses connections
    keys = [f"down-{i}" for i in range(12)]
    for key in keys:
        await insert(store, key)
    r = await failover(concurrency=4)  # fewer in flight than rows: some are claimed after the primary paused
    rows = await r.final(*keys)
    assert {row["status"] for row in rows.values()} == {"sent"}
    assert {row["transport"] for row in rows.values()} == {None}, "the row keeps what the application asked for"
    received = [email.message_from_bytes(m.data, policy=email.policy.default) for m in backup.accepted]
    assert len(received) == 12 and len({m["Message-ID"] for m in received}) == 12, "each row once"
    assert {m["Message-ID"] for m in received} == {row["message_id"] for row in rows.values()}
    histories = [await attempts(store, row["id"]) for row in rows.values()]
    for history, row in zip(histories, rows.values(), strict=True):
        # each probe of the primary (when its pause of 0.3 s ran out) is an attempt, not charged
        assert history[-1] == ("backup", "sent") and set(history[:-1]) <= {("smtp", "transient")}
        assert row["attempts"] == 1, "an attempt no server judged is not charged"
    assert any(len(h) > 1 for h in histories), "a send in flight failed over"
    assert [("backup", "sent")] in histories, "once the primary was paused, rows went straight to the fallback"


async def test_an_ambiguous_answer_of_the_primary_never_fails_over(
        failover: Any, store: Store, smtp_server: SmtpTestServer, backup: SmtpTestServer) -> None:
    smtp_server.drop("DATA")  # the body went out, no answer came: it may have been accepted
    await insert(store, "unsure")
    r = await failover(in_doubt="hold")
    rows = await r.final("unsure")
    assert rows["unsure"]["status"] == "in_doubt"
    assert backup.accepted == [] and await attempts(store, rows["unsure"]["id"]) == [("smtp", "ambiguous")]


async def test_a_refused_recipient_stays_refused_and_is_not_failed_over(
        failover: Any, store: Store, smtp_server: SmtpTestServer, backup: SmtpTestServer) -> None:
    smtp_server.fail("RCPT", "550 5.1.1 no such user")
    await insert(store, "bad", to_addresses=["nobody@example.com"])
    r = await failover()
    rows = await r.final("bad")
    assert rows["bad"]["status"] == "failed" and backup.accepted == []
    assert await attempts(store, rows["bad"]["id"]) == [("smtp", "permanent")]


async def test_new_rows_use_the_primary_again_once_it_is_back(
        failover: Any, store: Store, smtp_server: SmtpTestServer, backup: SmtpTestServer) -> None:
    smtp_server.stop()
    await insert(store, "while-down")
    r = await failover()
    await r.final("while-down")
    assert len(backup.accepted) == 1
    smtp_server.start()
    await anyio.sleep(0.5)  # the primary's pause (0.3 s) runs out
    await insert(store, "after")
    rows = await r.final("after")
    assert rows["after"]["status"] == "sent"
    assert [m.rcpt_tos for m in smtp_server.accepted] == [("to@example.com",)]
    assert len(backup.accepted) == 1


async def test_resend_refusing_the_account_hands_the_rows_to_postmark_under_the_same_key(
        db_url: str, store: Store) -> None:
    server = ProviderServer().start()
    common = {"base_url": server.base_url, "timeout_seconds": 2, "rate_per_second": 1000, "burst": 100}
    options = {"resend": {"kind": "resend", "api_key": "revoked", "fallback": "postmark", "batch": False, **common},
               "postmark": {"kind": "postmark", "api_key": "test", "batch": False, **common}}
    settings = settings_for(db_url, SimpleNamespace(host="127.0.0.1", port=free_port()), transports=options,
                            default_transport="resend")
    transports = {name: HttpApiTransport(ApiTransportSettings(**o), name=name) for name, o in options.items()}
    daemon = Daemon(settings, transports, default_transport="resend")  # type: ignore[arg-type]
    try:
        for i in range(3):
            await insert(store, f"api-{i}")
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            rows = await Running(daemon, store).final("api-0", "api-1", "api-2")
            daemon.stop()
    finally:
        for transport in transports.values():
            await transport.aclose()
        server.stop()
    assert {row["status"] for row in rows.values()} == {"sent"}
    assert {r.status for r in server.sends("/emails")} == {403}  # Resend: the key is not valid
    delivered = server.sends("/email")
    assert sorted(r.json()["Metadata"]["dedupe_key"] for r in delivered) == ["api-0", "api-1", "api-2"]
    for row in rows.values():
        assert (await attempts(store, row["id"]))[-1] == ("postmark", "sent")


async def test_a_row_whose_last_outcome_was_unknown_stays_with_that_transport(db_url: str, store: Store) -> None:
    # the claim returns the transport of an ambiguous last attempt, and the executor routes the resend there
    await insert(store, "pinned")
    await insert(store, "free")
    session = await ClaimSession.open(db_url)
    try:
        claimed = {d.dedupe_key: d for d in await session.claim_due(10, "w")}
        writes = []
        for key, outcome in (("pinned", "ambiguous"), ("free", "transient")):
            write = write_for(claimed[key], Status.PENDING)
            writes.append(dataclasses.replace(write, attempt=dataclasses.replace(
                write.attempt, outcome=OutcomeKind(outcome), transport="backup")))
        await session.record_outcomes(writes)
        await store.execute("UPDATE email_queue SET scheduled_at = now() - interval '1 s'")
        again = {d.dedupe_key: d for d in await session.claim_due(10, "w")}
        assert again["pinned"].pinned_transport == "backup" and again["free"].pinned_transport is None
        # a later answer of that transport ("try later") does not unpin it: the first may have gone out
        later = write_for(again["pinned"], Status.PENDING)
        await session.record_outcomes([dataclasses.replace(later, attempt=dataclasses.replace(
            later.attempt, outcome=OutcomeKind.TRANSIENT, transport="backup"))])
        await store.execute("UPDATE email_queue SET scheduled_at = now() - interval '1 s'")
        [third] = [d for d in await session.claim_due(10, "w") if d.dedupe_key == "pinned"]
        assert third.attempts == 3 and third.pinned_transport == "backup"
    finally:
        await session.close()


async def test_a_resend_after_an_unknown_outcome_waits_for_its_transport_instead_of_failing_over(
        failover: Any, store: Store, smtp_server: SmtpTestServer, backup: SmtpTestServer) -> None:
    await insert(store, "unsure")  # as if its first attempt, on smtp, had ended without an answer
    await store.execute("UPDATE email_deliveries SET attempts = 1, first_attempt_at = now() WHERE dedupe_key = 'unsure'")
    await store.execute(
        "INSERT INTO email_delivery_attempts (delivery_id, attempt, started_at, finished_at, outcome, transport, worker)"
        " SELECT id, 1, now(), now(), 'ambiguous', 'smtp', 'w' FROM email_deliveries WHERE dedupe_key = 'unsure'")
    smtp_server.stop()
    r = await failover()
    await anyio.sleep(1.5)  # the primary is probed and paused again and again meanwhile
    assert backup.accepted == [], "the fallback never saw the key: it must not get the resend"
    smtp_server.start()
    rows = await r.final("unsure")
    assert rows["unsure"]["status"] == "sent" and len(smtp_server.accepted) == 1


async def test_a_send_cut_off_on_the_fallback_is_rescued_to_the_fallback_never_to_the_primary(
        failover: Any, store: Store, smtp_server: SmtpTestServer, backup: SmtpTestServer) -> None:
    # the first daemon routes the row to the fallback (the primary refuses connections) and is stopped
    # while the fallback holds its answer to DATA: the fallback has the message, the outcome is unknown
    fast = {"connect_timeout_seconds": 1, "command_timeout_seconds": 1, "data_timeout_seconds": 2,
            "send_timeout_seconds": 3}
    primary = {"host": smtp_server.host, "port": smtp_server.port, "tls": "none", **fast}
    settings = {"smtp": primary, "backup_options": fast, "in_doubt": "resend", "shutdown_grace_seconds": 0.1,
                "rescue_after_seconds": 4.5, "rescue_interval_seconds": 0.3}
    smtp_server.stop()
    backup.delay("DATA", 5.0, times=1)
    await insert(store, "cut-off")
    first = await failover(**settings)
    with anyio.fail_after(10):
        while not backup.messages:
            await anyio.sleep(0.02)
    first.daemon.stop()
    await first.wait_for(lambda rows: rows["cut-off"]["status"] == "sending", ["cut-off"])
    smtp_server.start()  # the primary is back before the claim is rescued
    backup.clear_faults()
    rescuer = await failover(**settings)
    rows = await rescuer.final("cut-off", timeout=30)

    assert rows["cut-off"]["status"] == "sent"
    assert smtp_server.accepted == [], "the primary never had the message: the resend must not go there"
    assert len(backup.messages) == 2, "the resend (the same message) went where the first send went"
    history = await attempts(store, rows["cut-off"]["id"])
    assert history[-2:] == [("backup", "ambiguous"), ("backup", "sent")], history
    assert ("smtp", "ambiguous") not in history, history


async def test_a_row_whose_fallback_cannot_be_recorded_is_held_back_not_sent(
        failover: Any, store: Store, smtp_server: SmtpTestServer, backup: SmtpTestServer) -> None:
    # PostgreSQL refuses the write that records the fallback before the send
    await store.execute("""
        CREATE FUNCTION refuse_carrier() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'carrier refused by the test'; END $$;
        CREATE TRIGGER refuse_carrier BEFORE UPDATE OF carrier ON email_queue
            FOR EACH ROW WHEN (NEW.carrier IS NOT NULL) EXECUTE FUNCTION refuse_carrier()""")
    smtp_server.stop()
    await insert(store, "unrecorded")
    r = await failover()
    row = (await r.wait_for(lambda rows: True, ["unrecorded"]))["unrecorded"]
    with anyio.fail_after(10):
        while not backup.messages and not any("could not record the fallback backup" in (a["error"] or "")
                                              for a in await store.attempts(row["id"])):
            await anyio.sleep(0.05)
    assert backup.messages == [], "the fallback got a send that a rescuer could not have found"
    assert (await store.status(["unrecorded"]))[0]["status"] in ("pending", "sending")


async def test_a_rescuer_reads_the_carrier_of_the_dead_claim_only_never_an_earlier_claims(
        db_url: str, store: Store) -> None:
    await insert(store, "earlier")
    await insert(store, "this")
    session = await ClaimSession.open(db_url)
    try:
        claimed = {d.dedupe_key: d for d in await session.claim_due(10, "w")}
        assert await session.record_carrier(claimed["earlier"], "backup")
        await session.record_outcomes([write_for(claimed["earlier"], Status.PENDING)])  # retried: a new claim
        await store.execute("UPDATE email_queue SET scheduled_at = now() - interval '1 s'")
        again = await session.claim_due(10, "w")
        assert [d.dedupe_key for d in again] == ["earlier"]
        assert await session.record_carrier(claimed["this"], "backup")
    finally:
        await session.close()  # the process "dies": both claims left 'sending', their locks free
    rescuer = await ClaimSession.open(db_url)
    try:
        dead = {c.delivery.dedupe_key: c for c in await rescuer.find_dead_claims(0, 10)}
    finally:
        await rescuer.close()
    assert dead["this"].carrier == "backup"
    assert dead["earlier"].carrier is None, "its second claim went through its own transport"
