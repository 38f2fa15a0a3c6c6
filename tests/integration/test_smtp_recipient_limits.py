"""Recipients refused with 452 (too many recipients) go out in further transactions of the same attempt.

RFC 5321 section 4.5.3.1.10: a server may refuse recipients past its limit
per transaction with 452 (Postfix: ``smtpd_recipient_limit``, ``452 4.5.3 Too
many recipients``); the client sends the rest in another transaction. The
transport does so on the same connection, while each transaction makes
progress. Only 452 is retried this way: other 4xx replies mean "later" and
stay refused.

Every test runs against aiosmtpd with and without PIPELINING advertised.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Iterator

import pytest

from outbox_mailer.delivery import ComposedMessage, Outcome, OutcomeKind, RefusedRecipient
from outbox_mailer.transports.smtp import SmtpTransport
from tests.integration.test_smtp_transport import BODY, SENDER, make_delivery, settings_for
from tests.smtp_server import SmtpTestServer, running_smtp_server

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=[False, True], ids=["one-by-one", "pipelining"])
def smtp_server(request: pytest.FixtureRequest) -> Iterator[SmtpTestServer]:
    with running_smtp_server(pipelining=request.param) as server:
        yield server


@pytest.fixture
async def transport(smtp_server: SmtpTestServer) -> AsyncIterator[SmtpTransport]:
    t = SmtpTransport(settings_for(smtp_server))
    yield t
    await t.aclose()


def addresses(n: int) -> tuple[str, ...]:
    return tuple(f"r{i:03d}@example.com" for i in range(n))


async def send(t: SmtpTransport, recipients: tuple[str, ...]) -> Outcome:
    return await t.send(ComposedMessage(SENDER, recipients, "<abc@example.com>", BODY), make_delivery())


def delivered(server: SmtpTestServer) -> Counter[str]:
    return Counter(r for m in server.accepted for r in m.rcpt_tos)


async def test_250_recipients_with_a_limit_of_100_go_out_in_3_transactions(
    transport: SmtpTransport, smtp_server: SmtpTestServer
) -> None:
    smtp_server.recipient_limit = 100
    for queue_id in ("AAA111", "BBB222", "CCC333"):
        smtp_server.fail("DATA", f"250 2.0.0 Ok: queued as {queue_id}", times=1)
    everyone = addresses(250)
    outcome = await send(transport, everyone)
    assert outcome.kind is OutcomeKind.SENT, outcome
    assert outcome.refused == () and outcome.error is None
    assert outcome.provider_message_id == "AAA111"  # the first transaction's
    assert (outcome.reply_code, outcome.enhanced_code) == (250, "2.0.0")
    accepted = smtp_server.accepted
    assert [len(m.rcpt_tos) for m in accepted] == [100, 100, 50]
    assert delivered(smtp_server) == Counter(everyone)  # every recipient exactly once
    assert {m.data for m in accepted} == {BODY}  # the same bytes, the same Message-ID
    assert {m.connection for m in accepted} == {1}  # one connection
    assert smtp_server.verbs().count("MAIL") == 3
    assert (await send(transport, everyone[:1])).kind is OutcomeKind.SENT  # still usable
    assert smtp_server.connections == 1


async def test_452_is_retried_other_4xx_stay_refused(transport: SmtpTransport, smtp_server: SmtpTestServer) -> None:
    smtp_server.recipient_limit = 2
    smtp_server.fail("RCPT", "450 4.2.1 mailbox busy", address="busy@example.com")
    recipients = ("a@example.com", "busy@example.com", "b@example.com", "c@example.com")
    outcome = await send(transport, recipients)
    assert outcome.kind is OutcomeKind.SENT, outcome
    assert outcome.refused == (RefusedRecipient("busy@example.com", 450, "4.2.1 mailbox busy"),)
    assert not outcome.refused[0].permanent
    assert "busy@example.com" in (outcome.error or "") and "450" in (outcome.error or "")
    assert delivered(smtp_server) == Counter(["a@example.com", "b@example.com", "c@example.com"])
    assert smtp_server.verbs().count("MAIL") == 2  # busy@ is not tried again in this attempt


async def test_450_for_one_of_two_recipients_is_sent_with_it_refused(
    transport: SmtpTransport, smtp_server: SmtpTestServer
) -> None:
    smtp_server.fail("RCPT", "450 4.2.1 mailbox busy", address="busy@example.com")
    outcome = await send(transport, ("a@example.com", "busy@example.com"))
    assert outcome.kind is OutcomeKind.SENT
    assert outcome.refused == (RefusedRecipient("busy@example.com", 450, "4.2.1 mailbox busy"),)
    assert smtp_server.verbs().count("MAIL") == 1


async def test_a_transaction_without_progress_ends_the_attempt(
    transport: SmtpTransport, smtp_server: SmtpTestServer
) -> None:
    smtp_server.fail("RCPT", "452 4.2.2 mailbox full", address="full@example.com")
    outcome = await send(transport, ("a@example.com", "full@example.com"))
    assert outcome.kind is OutcomeKind.SENT, outcome
    assert outcome.refused == (RefusedRecipient("full@example.com", 452, "4.2.2 mailbox full"),)
    assert not outcome.refused[0].permanent
    assert smtp_server.verbs().count("MAIL") == 2  # one follow-up, refused at its first RCPT: no third
    assert delivered(smtp_server) == Counter(["a@example.com"])
    assert (await send(transport, ("a@example.com",))).kind is OutcomeKind.SENT  # connection still usable
    assert smtp_server.connections == 1


async def test_follow_up_disconnected_before_data_leaves_its_recipients_not_sent(
    transport: SmtpTransport, smtp_server: SmtpTestServer
) -> None:
    smtp_server.recipient_limit = 2
    smtp_server.fail("DATA", "250 2.0.0 Ok: queued as AAA111", times=1)
    smtp_server.drop("RCPT", address="r002@example.com")  # refused by the limit first: only in the follow-up
    outcome = await send(transport, addresses(4))
    assert outcome.kind is OutcomeKind.SENT, outcome
    assert outcome.provider_message_id == "AAA111"
    assert [(r.address, r.reply_code, r.unknown) for r in outcome.refused] == [
        ("r002@example.com", None, False), ("r003@example.com", None, False)]
    assert not any(r.permanent for r in outcome.refused)
    assert "r002@example.com" in (outcome.error or "") and "r003@example.com" in (outcome.error or "")
    assert delivered(smtp_server) == Counter(addresses(2))
    assert (await send(transport, ("a@example.com",))).kind is OutcomeKind.SENT  # on a new connection


async def test_follow_up_disconnected_after_the_body_is_unknown(
    transport: SmtpTransport, smtp_server: SmtpTestServer
) -> None:
    smtp_server.recipient_limit = 2
    smtp_server.fail("DATA", "250 2.0.0 Ok: queued as AAA111", times=1)
    smtp_server.drop("DATA")  # the second DATA: body read, no reply
    outcome = await send(transport, addresses(3))
    assert outcome.kind is OutcomeKind.SENT, outcome
    assert outcome.provider_message_id == "AAA111"
    [unknown] = outcome.refused
    assert (unknown.address, unknown.reply_code, unknown.unknown, unknown.permanent) == (
        "r002@example.com", None, True, False)
    assert "may have been accepted" in (outcome.error or "")
    assert [m.rcpt_tos for m in smtp_server.messages] == [addresses(2), addresses(3)[2:]]


async def test_follow_up_refused_at_data_keeps_the_data_reply(
    transport: SmtpTransport, smtp_server: SmtpTestServer
) -> None:
    smtp_server.recipient_limit = 2
    smtp_server.fail("DATA", "250 2.0.0 Ok: queued as AAA111", times=1)
    smtp_server.fail("DATA", "554 5.6.0 message rejected", times=1)
    outcome = await send(transport, addresses(3))
    assert outcome.kind is OutcomeKind.SENT, outcome
    assert outcome.refused == (RefusedRecipient("r002@example.com", 554, "DATA: 554 5.6.0 message rejected"),)
    assert outcome.refused[0].permanent


async def test_send_timeout_inside_a_follow_up_keeps_the_attempt_sent(smtp_server: SmtpTestServer) -> None:
    smtp_server.recipient_limit = 1
    smtp_server.delay("RCPT", 2.0, address="r001@example.com", times=1)  # the limit answers first: used up by the follow-up
    settings = settings_for(smtp_server, data_timeout_seconds=0.6, send_timeout_seconds=0.6,
                            command_timeout_seconds=5.0)  # fmt: skip
    t = SmtpTransport(settings)
    try:
        outcome = await send(t, addresses(2))
    finally:
        await t.aclose()
    assert outcome.kind is OutcomeKind.SENT, outcome
    assert [(r.address, r.reply_code, r.unknown) for r in outcome.refused] == [("r001@example.com", None, False)]
    assert "send timeout" in outcome.refused[0].message


async def test_limit_of_one_sends_one_transaction_per_recipient(
    transport: SmtpTransport, smtp_server: SmtpTestServer
) -> None:
    smtp_server.recipient_limit = 1
    smtp_server.fail("RCPT", "550 5.1.1 no such user", address="r001@example.com")
    outcome = await send(transport, addresses(4))
    assert outcome.kind is OutcomeKind.SENT, outcome
    assert outcome.refused == (RefusedRecipient("r001@example.com", 550, "5.1.1 no such user"),)
    assert delivered(smtp_server) == Counter(a for a in addresses(4) if a != "r001@example.com")
