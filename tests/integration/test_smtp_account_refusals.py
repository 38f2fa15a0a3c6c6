"""Replies about our account (authentication required, relaying denied) pause the transport.

A relay that wants AUTH answers ``530 5.7.0 Authentication required`` to MAIL,
or ``554 5.7.1 Relay access denied`` to RCPT. Neither says anything about the
message or its recipient: the outcome is not charged against the row and asks
for a pause of the transport, and ``check()`` finds it with a MAIL/RCPT probe
that never sends DATA. A per-recipient refusal (``550 5.1.1`` unknown user,
``550 5.7.1`` refused by the recipient's policy) stays that recipient's.

Every test runs against aiosmtpd with and without PIPELINING advertised.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest

from outbox_mailer.delivery import ComposedMessage, Outcome, OutcomeKind, RefusedRecipient
from outbox_mailer.errors import TransportUnavailable
from outbox_mailer.store import Store
from outbox_mailer.transports.smtp import SmtpTransport
from tests.integration.conftest import insert
from tests.integration.test_smtp_transport import BODY, SENDER, TO, make_delivery, settings_for
from tests.smtp_server import SmtpTestServer, running_smtp_server

pytestmark = pytest.mark.anyio

PROBE_TO = "outbox-mailer-check@example.net"  # the probe's recipient when the sender is @example.com


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=[False, True], ids=["one-by-one", "pipelining"])
def smtp_server(request: pytest.FixtureRequest) -> Iterator[SmtpTestServer]:
    with running_smtp_server(pipelining=request.param) as server:
        yield server


@pytest.fixture
async def transport(smtp_server: SmtpTestServer) -> AsyncIterator[SmtpTransport]:
    t = SmtpTransport(settings_for(smtp_server), probe_sender=SENDER)
    yield t
    await t.aclose()


async def send(t: SmtpTransport, *recipients: str) -> Outcome:
    message = ComposedMessage(SENDER, recipients or (TO,), "<abc@example.com>", BODY)
    return await t.send(message, make_delivery())


def assert_pause(outcome: Outcome, code: int, enhanced: str | None, reply: str) -> None:
    assert outcome.kind is OutcomeKind.TRANSIENT, outcome
    assert (outcome.reply_code, outcome.enhanced_code) == (code, enhanced), outcome
    assert outcome.charge_attempt is False
    assert outcome.pause_seconds == 300.0
    assert reply in (outcome.error or "") and "paused" in (outcome.error or ""), outcome.error


# -- sending ------------------------------------------------------------------


async def test_530_on_mail_pauses_the_transport_uncharged(
    transport: SmtpTransport, smtp_server: SmtpTestServer
) -> None:
    smtp_server.fail("MAIL", "530 5.7.0 Authentication required")
    outcome = await send(transport, TO, "cc@example.com")
    assert_pause(outcome, 530, "5.7.0", "530 5.7.0 Authentication required")
    assert outcome.refused == ()
    assert smtp_server.messages == []


@pytest.mark.parametrize(
    "reply",
    [
        "554 5.7.1 <to@example.com>: Relay access denied",
        "550 5.7.1 Relaying denied",
        "550 relay not permitted",
        "530 5.7.1 Authentication required",
        "454 4.7.1 <to@example.com>: Relay access denied",
        "550 5.7.54 SMTP; Unable to relay recipient in non-accepted domain",
    ],
)
async def test_relay_or_auth_refusal_of_every_rcpt_pauses_the_transport(
    transport: SmtpTransport, smtp_server: SmtpTestServer, reply: str
) -> None:
    smtp_server.fail("RCPT", reply)
    outcome = await send(transport, TO, "cc@example.com")
    code, text = reply.split(" ", 1)
    enhanced = text.split()[0] if text[0].isdigit() else None
    assert_pause(outcome, int(code), enhanced, reply)
    assert smtp_server.messages == []
    assert (await send(transport)).kind is OutcomeKind.TRANSIENT  # the connection stayed usable (RSET)
    assert smtp_server.connections == 1


async def test_user_unknown_stays_a_permanent_refusal_of_that_recipient(
    transport: SmtpTransport, smtp_server: SmtpTestServer
) -> None:
    smtp_server.fail("RCPT", "550 5.1.1 <to@example.com>: user unknown", address=TO)
    outcome = await send(transport)
    assert outcome.kind is OutcomeKind.PERMANENT, outcome
    assert outcome.pause_seconds is None and outcome.charge_attempt
    assert outcome.refused == (RefusedRecipient(TO, 550, "5.1.1 <to@example.com>: user unknown"),)
    assert outcome.refused[0].permanent


async def test_recipient_policy_5_7_1_is_not_an_account_problem(
    transport: SmtpTransport, smtp_server: SmtpTestServer
) -> None:
    smtp_server.fail("RCPT", "550 5.7.1 Message refused by recipient's policy")
    outcome = await send(transport)
    assert outcome.kind is OutcomeKind.PERMANENT, outcome
    assert outcome.pause_seconds is None and outcome.charge_attempt


async def test_relay_denied_for_one_recipient_while_another_is_accepted_is_that_recipients(
    transport: SmtpTransport, smtp_server: SmtpTestServer
) -> None:
    # the relay takes mail from us (for its own domains): the refusal is about that recipient's domain
    smtp_server.fail("RCPT", "554 5.7.1 Relay access denied", address="out@example.org")
    outcome = await send(transport, TO, "out@example.org")
    assert outcome.kind is OutcomeKind.SENT, outcome
    assert outcome.pause_seconds is None
    assert outcome.refused == (RefusedRecipient("out@example.org", 554, "5.7.1 Relay access denied"),)


# -- check() --------------------------------------------------------------------


async def test_check_raises_on_530_at_mail(transport: SmtpTransport, smtp_server: SmtpTestServer) -> None:
    smtp_server.fail("MAIL", "530 5.7.0 Authentication required")
    with pytest.raises(TransportUnavailable, match=r"530 5.7.0 Authentication required") as caught:
        await transport.check()
    assert caught.value.transport == "smtp"
    assert "DATA" not in smtp_server.verbs() and smtp_server.messages == []


async def test_check_raises_on_relay_denied_at_rcpt(transport: SmtpTransport, smtp_server: SmtpTestServer) -> None:
    smtp_server.fail("RCPT", "554 5.7.1 Relay access denied")
    with pytest.raises(TransportUnavailable, match=r"554 5.7.1 Relay access denied"):
        await transport.check()
    assert smtp_server.commands[:2] == [(1, "MAIL", SENDER), (1, "RCPT", PROBE_TO)]
    assert "DATA" not in smtp_server.verbs()
    assert smtp_server.messages == []


async def test_check_against_a_normal_server_sends_no_message(
    transport: SmtpTransport, smtp_server: SmtpTestServer
) -> None:
    line = await transport.check()
    assert line.startswith(f"127.0.0.1:{smtp_server.port} 220 ")
    assert "probe MAIL/RCPT accepted" in line
    assert smtp_server.verbs() == ["MAIL", "RCPT", "RSET", "QUIT"]
    assert "DATA" not in smtp_server.verbs() and smtp_server.messages == []


async def test_check_probe_sender_defaults_to_postmaster_at_the_helo_name(smtp_server: SmtpTestServer) -> None:
    t = SmtpTransport(settings_for(smtp_server))  # helo_name client.example.com
    try:
        await t.check()
    finally:
        await t.aclose()
    assert [(v, a) for _, v, a in smtp_server.commands[:2]] == [
        ("MAIL", "postmaster@client.example.com"), ("RCPT", "outbox-mailer-check@example.com")]


async def test_check_probe_recipient_is_at_another_domain_than_the_sender(smtp_server: SmtpTestServer) -> None:
    t = SmtpTransport(settings_for(smtp_server), probe_sender="app@example.org")
    try:
        await t.check()
    finally:
        await t.aclose()
    assert [(v, a) for _, v, a in smtp_server.commands[:2]] == [
        ("MAIL", "app@example.org"), ("RCPT", "outbox-mailer-check@example.com")]


async def test_check_reports_other_probe_refusals_without_raising(
    transport: SmtpTransport, smtp_server: SmtpTestServer
) -> None:
    smtp_server.fail("RCPT", "550 5.1.1 user unknown")
    line = await transport.check()
    assert "probe RCPT refused: 550 5.1.1 user unknown" in line
    assert smtp_server.messages == []


# -- the daemon: the queue is not burned ------------------------------------------


@pytest.mark.parametrize(
    ("command", "reply"),
    [("MAIL", "530 5.7.0 Authentication required"), ("RCPT", "554 5.7.1 <to@example.com>: Relay access denied")],
)
async def test_daemon_pauses_instead_of_failing_the_queue(
    running: Any, store: Store, smtp_server: SmtpTestServer, caplog: pytest.LogCaptureFixture,
    command: str, reply: str,
) -> None:  # fmt: skip
    caplog.set_level(logging.INFO, logger="outbox_mailer")
    smtp_server.fail(command, reply)
    keys = [f"acct{i}" for i in range(30)]
    for key in keys:
        await insert(store, key)
    r = await running()
    await r.wait_for(lambda rows: any(row["last_error"] for row in rows.values()), keys)
    await anyio.sleep(1.0)  # the transport is paused: nothing more happens
    rows = {row["dedupe_key"]: row for row in await store.status(keys)}
    assert {row["status"] for row in rows.values()} == {"pending"}
    assert {row["attempts"] for row in rows.values()} == {0}  # not charged
    refused = [row for row in rows.values() if reply in (row["last_error"] or "")]
    assert 1 <= len(refused) <= 4
    assert smtp_server.verbs().count(command) <= 4  # one try per pooled connection at most, then the pause
    assert smtp_server.messages == []
    loud = [rec.getMessage() for rec in caplog.records if rec.levelno >= logging.WARNING]
    assert any(line.startswith("transport smtp paused") and reply in line for line in loud), loud
