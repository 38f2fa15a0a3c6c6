"""SmtpTransport against a real aiosmtpd server on 127.0.0.1, one reply class or fault per test.

Every test runs twice: against a server that does not advertise PIPELINING
(the transport sends one command at a time) and against one that does (MAIL,
RCPT and DATA go out in one write): the outcome must not depend on it.
"""

from __future__ import annotations

import ssl
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from aiosmtpd.smtp import AuthResult, LoginPassword

from outbox_mailer.delivery import ComposedMessage, Delivery, Outcome, OutcomeKind, RefusedRecipient
from outbox_mailer.errors import TransportUnavailable
from outbox_mailer.settings.transports import SmtpSettings
from outbox_mailer.transports.smtp import SmtpTransport
from tests.message_ids import claimed_message_id
from tests.smtp_server import SmtpTestServer, free_port, make_self_signed_cert, running_smtp_server

pytestmark = pytest.mark.anyio

SENDER = "app@example.com"
TO = "to@example.com"
BODY = (
    b"From: App <app@example.com>\r\n"
    b"To: to@example.com\r\n"
    b"Subject: hello\r\n"
    b"Message-ID: <abc@example.com>\r\n"
    b"\r\n"
    b"first line\r\n"
    b".a line starting with a dot\r\n"
    b".\r\n"
    b"last line\r\n"
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=[False, True], ids=["one-by-one", "pipelining"])
def pipelining(request: pytest.FixtureRequest) -> bool:
    """Whether the test server advertises PIPELINING."""
    return request.param


@pytest.fixture
def smtp_server(pipelining: bool) -> Iterator[SmtpTestServer]:
    with running_smtp_server(pipelining=pipelining) as server:
        yield server


def make_message(*recipients: str, sender: str = SENDER, data: bytes = BODY) -> ComposedMessage:
    return ComposedMessage(sender, recipients or (TO,), "<abc@example.com>", data)


def make_delivery(**overrides: Any) -> Delivery:
    fields: dict[str, Any] = dict(
        id=1, dedupe_key="key-1", claim_token=uuid.uuid4(), attempts=1, max_attempts=None,
        from_address=SENDER, to_addresses=(TO,), cc_addresses=(), bcc_addresses=(), reply_to=None,
        subject="hello", text_body="first line", html_body=None, headers={}, attachments=[], metadata={},
        transport=None, priority=0, scheduled_at=datetime.now(UTC), expires_at=None,
        created_at=datetime.now(UTC),
    )  # fmt: skip
    fields.update(overrides)
    fields.setdefault("message_id", claimed_message_id(fields["dedupe_key"]))
    return Delivery(**fields)


def settings_for(server: SmtpTestServer | None, **overrides: Any) -> SmtpSettings:
    values: dict[str, Any] = dict(
        host="127.0.0.1", port=server.port if server else free_port(), tls="none",
        helo_name="client.example.com", pool_size=2,
        # generous, so that a loaded machine does not fail the tests; the
        # timeout tests set tiny ones
        connect_timeout_seconds=2.0, command_timeout_seconds=2.0, data_timeout_seconds=2.0,
    )  # fmt: skip
    values.update(overrides)
    return SmtpSettings(**values)


@pytest.fixture
async def transport(smtp_server: SmtpTestServer) -> AsyncIterator[SmtpTransport]:
    t = SmtpTransport(settings_for(smtp_server))
    yield t
    await t.aclose()


async def send(t: SmtpTransport, *recipients: str, **kw: Any) -> Outcome:
    return await t.send(make_message(*recipients, **kw), make_delivery())


def assert_outcome(outcome: Outcome, kind: OutcomeKind, code: int | None, enhanced: str | None) -> None:
    assert (outcome.kind, outcome.reply_code, outcome.enhanced_code) == (kind, code, enhanced), outcome


# -- replies ---------------------------------------------------------------


async def test_250_sent_bytes_and_envelope_intact(transport: SmtpTransport, smtp_server: SmtpTestServer) -> None:
    outcome = await send(transport, TO, "cc@example.com")
    assert_outcome(outcome, OutcomeKind.SENT, 250, None)
    assert outcome.provider_message_id is None  # aiosmtpd's plain "250 OK" has no queue id
    assert outcome.refused == () and outcome.error is None
    [received] = smtp_server.accepted
    assert received.mail_from == SENDER
    assert received.rcpt_tos == (TO, "cc@example.com")
    assert received.data == BODY  # dot-stuffing undone, CRLF kept, nothing added


async def test_250_with_queue_id(transport: SmtpTransport, smtp_server: SmtpTestServer) -> None:
    smtp_server.fail("DATA", "250 2.0.0 Ok: queued as 4XYZ12abc")
    outcome = await send(transport)
    assert_outcome(outcome, OutcomeKind.SENT, 250, "2.0.0")
    assert outcome.provider_message_id == "4XYZ12abc"
    assert outcome.reply == "250 2.0.0 Ok: queued as 4XYZ12abc"  # the whole reply, for the attempt row
    assert len(smtp_server.accepted) == 1


async def test_8bit_body_uses_8bitmime_and_size(transport: SmtpTransport, smtp_server: SmtpTestServer) -> None:
    data = "Subject: caf\u00e9\r\n\r\nd\u00e9j\u00e0 vu\r\n".encode()
    outcome = await send(transport, data=data)
    assert outcome.kind is OutcomeKind.SENT
    assert smtp_server.accepted[0].data == data


async def test_421_on_mail_is_transient_and_drops_the_connection(
    transport: SmtpTransport, smtp_server: SmtpTestServer
) -> None:
    smtp_server.fail("MAIL", "421 4.3.2 Service shutting down", times=1)
    outcome = await send(transport)
    assert_outcome(outcome, OutcomeKind.TRANSIENT, 421, "4.3.2")
    assert outcome.error == f"MAIL <{SENDER}>: 421 4.3.2 Service shutting down"
    assert outcome.charge_attempt
    assert smtp_server.messages == []
    assert (await send(transport)).kind is OutcomeKind.SENT
    assert smtp_server.connections == 2  # the 421 connection was not reused


@pytest.mark.parametrize(
    ("reply", "code", "enhanced"),
    [
        ("450 4.2.0 greylisted, try again later", 450, "4.2.0"),
        ("451 4.3.0 local error in processing", 451, "4.3.0"),
        ("452 4.5.3 too many recipients", 452, "4.5.3"),
    ],
)
async def test_4xx_on_rcpt_is_transient_and_the_connection_stays_usable(
    transport: SmtpTransport, smtp_server: SmtpTestServer, reply: str, code: int, enhanced: str
) -> None:
    smtp_server.fail("RCPT", reply, times=1)
    outcome = await send(transport)
    assert_outcome(outcome, OutcomeKind.TRANSIENT, code, enhanced)
    assert outcome.error == f"RCPT <{TO}>: {reply}"
    assert outcome.refused == (RefusedRecipient(TO, code, reply[4:]),)
    assert smtp_server.messages == []
    assert smtp_server.verbs() == ["MAIL", "RCPT", "RSET"]
    assert (await send(transport)).kind is OutcomeKind.SENT
    assert smtp_server.connections == 1


async def test_550_on_every_rcpt_is_permanent(transport: SmtpTransport, smtp_server: SmtpTestServer) -> None:
    smtp_server.fail("RCPT", "550 5.1.1 no such user")
    outcome = await send(transport, "a@example.com", "b@example.com")
    assert_outcome(outcome, OutcomeKind.PERMANENT, 550, "5.1.1")
    assert [r.address for r in outcome.refused] == ["a@example.com", "b@example.com"]
    assert all(r.reply_code == 550 and r.message == "5.1.1 no such user" for r in outcome.refused)
    assert "RCPT <a@example.com>: 550 5.1.1 no such user" in (outcome.error or "")
    assert smtp_server.messages == []
    assert "DATA" not in smtp_server.verbs()


async def test_all_refused_with_one_4xx_is_transient(transport: SmtpTransport, smtp_server: SmtpTestServer) -> None:
    smtp_server.fail("RCPT", "550 5.1.1 no such user", address="a@example.com")
    smtp_server.fail("RCPT", "452 4.2.2 mailbox full", address="b@example.com")
    outcome = await send(transport, "a@example.com", "b@example.com")
    assert_outcome(outcome, OutcomeKind.TRANSIENT, 452, "4.2.2")
    assert [r.reply_code for r in outcome.refused] == [550, 452]


@pytest.mark.parametrize(
    ("reply", "code", "enhanced"),
    [("552 5.3.4 message too big", 552, "5.3.4"), ("554 5.7.1 rejected as spam", 554, "5.7.1")],
)
async def test_5xx_after_data_is_permanent(
    transport: SmtpTransport, smtp_server: SmtpTestServer, reply: str, code: int, enhanced: str
) -> None:
    smtp_server.fail("DATA", reply)
    outcome = await send(transport)
    assert_outcome(outcome, OutcomeKind.PERMANENT, code, enhanced)
    assert outcome.error == f"DATA: {reply}"
    [received] = smtp_server.messages
    assert received.reply == reply and not received.accepted


async def test_partial_rcpt_refusal_sends_to_the_accepted(
    transport: SmtpTransport, smtp_server: SmtpTestServer
) -> None:
    smtp_server.fail("RCPT", "550 5.1.1 no such user", address="bad@example.com")
    outcome = await send(transport, "bad@example.com", "good@example.com")
    assert_outcome(outcome, OutcomeKind.SENT, 250, None)
    assert outcome.refused == (RefusedRecipient("bad@example.com", 550, "5.1.1 no such user"),)
    assert outcome.error == "some recipients refused: RCPT <bad@example.com>: 550 5.1.1 no such user"
    [received] = smtp_server.accepted
    assert received.rcpt_tos == ("good@example.com",)


# -- faults ----------------------------------------------------------------


async def test_disconnect_before_data_is_transient(transport: SmtpTransport, smtp_server: SmtpTestServer) -> None:
    smtp_server.drop("RCPT")
    outcome = await send(transport)
    assert_outcome(outcome, OutcomeKind.TRANSIENT, None, None)
    assert (outcome.error or "").startswith(f"RCPT <{TO}>: ")
    assert smtp_server.messages == []


async def test_disconnect_after_data_without_reply_is_ambiguous(
    transport: SmtpTransport, smtp_server: SmtpTestServer
) -> None:
    smtp_server.drop("DATA", times=1)
    outcome = await send(transport)
    assert_outcome(outcome, OutcomeKind.AMBIGUOUS, None, None)
    assert (outcome.error or "").startswith("DATA: ")
    [received] = smtp_server.messages
    assert received.reply is None and received.data == BODY  # the server did get it
    assert (await send(transport)).kind is OutcomeKind.SENT
    assert smtp_server.connections == 2


async def test_slow_data_reply_past_data_timeout_is_ambiguous(smtp_server: SmtpTestServer) -> None:
    smtp_server.delay("DATA", 1.5)
    t = SmtpTransport(settings_for(smtp_server, data_timeout_seconds=0.3))
    with anyio.fail_after(1.2):
        outcome = await send(t)
    await t.aclose()
    assert_outcome(outcome, OutcomeKind.AMBIGUOUS, None, None)
    assert len(smtp_server.messages) == 1


async def test_slow_rcpt_reply_past_command_timeout_is_transient(smtp_server: SmtpTestServer) -> None:
    smtp_server.delay("RCPT", 1.5)
    transport = SmtpTransport(settings_for(smtp_server, command_timeout_seconds=0.3))
    with anyio.fail_after(1.2):
        outcome = await send(transport)
    assert_outcome(outcome, OutcomeKind.TRANSIENT, None, None)
    assert outcome.charge_attempt
    assert smtp_server.messages == []
    smtp_server.clear_faults()
    assert (await send(transport)).kind is OutcomeKind.SENT
    assert smtp_server.connections == 2  # the timed-out connection was discarded
    await transport.aclose()


async def test_connection_refused_is_transient_and_uncharged() -> None:
    t = SmtpTransport(settings_for(None))
    outcome = await send(t)
    await t.aclose()
    assert_outcome(outcome, OutcomeKind.TRANSIENT, None, None)
    assert not outcome.charge_attempt
    assert "connect" in (outcome.error or "")


async def test_fail_first_then_succeed(transport: SmtpTransport, smtp_server: SmtpTestServer) -> None:
    smtp_server.fail("MAIL", "451 4.7.1 try again", times=1)
    first, second = await send(transport), await send(transport)
    assert_outcome(first, OutcomeKind.TRANSIENT, 451, "4.7.1")
    assert second.kind is OutcomeKind.SENT
    assert smtp_server.connections == 1  # RSET kept the connection usable


async def test_utf8_envelope_needs_smtputf8(transport: SmtpTransport, smtp_server: SmtpTestServer) -> None:
    assert (await send(transport, "j\u00fcrgen@example.com")).kind is OutcomeKind.SENT
    assert smtp_server.accepted[0].rcpt_tos == ("j\u00fcrgen@example.com",)
    with running_smtp_server(enable_SMTPUTF8=False, pipelining=smtp_server.pipelining) as ascii_only:
        t = SmtpTransport(settings_for(ascii_only))
        outcome = await send(t, "j\u00fcrgen@example.com")
        await t.aclose()
    assert_outcome(outcome, OutcomeKind.PERMANENT, None, None)
    assert "SMTPUTF8" in (outcome.error or "") and ascii_only.messages == []


async def test_invalid_envelope_is_permanent_without_io(
    transport: SmtpTransport, smtp_server: SmtpTestServer
) -> None:
    outcome = await send(transport, "to@example.com\r\nRCPT TO:<evil@example.com>")
    assert outcome.kind is OutcomeKind.PERMANENT
    assert smtp_server.connections == 0


# -- pool ------------------------------------------------------------------


async def test_pool_reuses_one_connection(transport: SmtpTransport, smtp_server: SmtpTestServer) -> None:
    for _ in range(5):
        assert (await send(transport)).kind is OutcomeKind.SENT
    assert len(smtp_server.accepted) == 5
    assert smtp_server.connections == 1
    assert "QUIT" not in smtp_server.verbs()


async def test_pool_size_bounds_open_connections(smtp_server: SmtpTestServer) -> None:
    smtp_server.delay("DATA", 0.05)  # keep each send busy so they overlap
    t = SmtpTransport(settings_for(smtp_server, pool_size=2))
    outcomes: list[Outcome] = []

    async def one() -> None:
        outcomes.append(await send(t))

    async with anyio.create_task_group() as tg:
        for _ in range(8):
            tg.start_soon(one)
    assert [o.kind for o in outcomes] == [OutcomeKind.SENT] * 8
    assert smtp_server.max_concurrent == 2
    assert smtp_server.connections == 2
    await t.aclose()
    assert smtp_server.wait_until(lambda: smtp_server.open_connections == 0)
    assert smtp_server.verbs().count("QUIT") == 2  # aclose says goodbye


async def test_reconnects_after_the_server_closed_an_idle_connection(
    transport: SmtpTransport, smtp_server: SmtpTestServer
) -> None:
    assert (await send(transport)).kind is OutcomeKind.SENT
    smtp_server.disconnect_all()
    assert (await send(transport)).kind is OutcomeKind.SENT
    assert len(smtp_server.accepted) == 2
    assert smtp_server.connections == 2


async def test_reused_connection_dead_at_mail_is_retried_once(
    transport: SmtpTransport, smtp_server: SmtpTestServer
) -> None:
    assert (await send(transport)).kind is OutcomeKind.SENT
    smtp_server.drop("MAIL", times=1)
    assert (await send(transport)).kind is OutcomeKind.SENT
    assert len(smtp_server.accepted) == 2
    assert smtp_server.connections == 2
    # MAIL on the first connection, MAIL again there (dropped), then on a new one.
    assert [conn for conn, verb, _ in smtp_server.commands if verb == "MAIL"] == [1, 1, 2]


async def test_fresh_connection_dropped_at_mail_is_not_retried(
    transport: SmtpTransport, smtp_server: SmtpTestServer
) -> None:
    assert (await send(transport)).kind is OutcomeKind.SENT
    smtp_server.drop("MAIL")
    outcome = await send(transport)  # reused connection dropped, then the new one too
    assert_outcome(outcome, OutcomeKind.TRANSIENT, None, None)
    assert smtp_server.connections == 2


# -- TLS, AUTH, check ------------------------------------------------------


async def test_required_starttls_not_offered_sends_nothing(smtp_server: SmtpTestServer) -> None:
    t = SmtpTransport(settings_for(smtp_server, tls="starttls"))
    outcome = await send(t)
    assert_outcome(outcome, OutcomeKind.TRANSIENT, None, None)
    assert "STARTTLS" in (outcome.error or "") and not outcome.charge_attempt
    with pytest.raises(TransportUnavailable, match="STARTTLS"):
        await t.check()
    await t.aclose()
    assert smtp_server.messages == []
    assert "MAIL" not in smtp_server.verbs()


async def test_check_returns_the_greeting(smtp_server: SmtpTestServer) -> None:
    t = SmtpTransport(settings_for(smtp_server))
    line = await t.check()
    assert line.startswith(f"127.0.0.1:{smtp_server.port} 220 smtp.example.com ")
    assert "(ESMTP, tls=none, STARTTLS no" in line and "\n" not in line
    assert smtp_server.verbs() == ["MAIL", "RCPT", "RSET", "QUIT"]  # the account probe; never DATA
    assert smtp_server.messages == []


async def test_check_on_a_closed_port_raises() -> None:
    t = SmtpTransport(settings_for(None))
    with pytest.raises(TransportUnavailable) as info:
        await t.check()
    assert type(info.value.__cause__).__module__.startswith("aiosmtplib")
    assert info.value.transport == "smtp"


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_self_signed_cert(tmp_path_factory.mktemp("tls"))


def server_tls_context(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*certificate)
    return context


def check_login(server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any) -> AuthResult:
    ok = isinstance(auth_data, LoginPassword) and (auth_data.login, auth_data.password) == (b"user", b"s3cret")
    return AuthResult(success=ok, handled=False)  # handled=False: the server sends the 535


@pytest.fixture
def tls_server(certificate: tuple[Path, Path], pipelining: bool) -> Iterator[SmtpTestServer]:
    with running_smtp_server(
        tls_context=server_tls_context(certificate), authenticator=check_login, pipelining=pipelining
    ) as server:
        yield server


async def test_starttls_with_ca_file_and_auth(tls_server: SmtpTestServer, certificate: tuple[Path, Path]) -> None:
    t = SmtpTransport(
        settings_for(tls_server, tls="starttls", ca_file=str(certificate[0]), username="user", password="s3cret")
    )
    assert_outcome(await send(t), OutcomeKind.SENT, 250, None)
    line = await t.check()
    await t.aclose()
    assert "STARTTLS yes, encrypted yes, AUTH ok" in line
    [received] = tls_server.accepted
    assert received.tls and received.data == BODY


async def test_wrong_password_is_transient_and_uncharged(
    tls_server: SmtpTestServer, certificate: tuple[Path, Path]
) -> None:
    t = SmtpTransport(
        settings_for(tls_server, tls="starttls", ca_file=str(certificate[0]), username="user", password="wrong")
    )
    outcome = await send(t)
    assert_outcome(outcome, OutcomeKind.TRANSIENT, 535, "5.7.8")
    assert not outcome.charge_attempt and "wrong" not in (outcome.error or "")
    with pytest.raises(TransportUnavailable, match="AUTH") as info:
        await t.check()
    assert "wrong" not in str(info.value)
    await t.aclose()
    assert tls_server.messages == []


async def test_untrusted_certificate_sends_nothing(tls_server: SmtpTestServer) -> None:
    t = SmtpTransport(settings_for(tls_server, tls="starttls"))
    outcome = await send(t)
    assert_outcome(outcome, OutcomeKind.TRANSIENT, None, None)
    with pytest.raises(TransportUnavailable):
        await t.check()
    await t.aclose()
    assert tls_server.messages == []
    assert "MAIL" not in tls_server.verbs()


async def test_validate_certs_false_accepts_a_self_signed_certificate(tls_server: SmtpTestServer) -> None:
    t = SmtpTransport(settings_for(tls_server, tls="starttls", validate_certs=False))
    assert (await send(t)).kind is OutcomeKind.SENT
    await t.aclose()
    assert tls_server.accepted[0].tls


async def test_implicit_tls(certificate: tuple[Path, Path], pipelining: bool) -> None:
    with running_smtp_server(ssl_context=server_tls_context(certificate), pipelining=pipelining) as server:
        t = SmtpTransport(settings_for(server, tls="implicit", ca_file=str(certificate[0])))
        assert (await send(t)).kind is OutcomeKind.SENT
        assert (await send(t)).kind is OutcomeKind.SENT  # the pooled connection, still encrypted
        await t.aclose()
        assert [m.data for m in server.accepted] == [BODY, BODY]
        assert server.connections == 1
        assert server.wait_until(lambda: server.open_connections == 0)
        assert server.verbs()[-1] == "QUIT"
