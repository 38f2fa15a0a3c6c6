"""RFC 2920 PIPELINING in SmtpTransport: MAIL, every RCPT and DATA in one write.

Two kinds of server on 127.0.0.1:

* aiosmtpd advertising PIPELINING (``tests/smtp_server.py``): it reads the
  pipelined group line by line; ``queued_input`` shows what had arrived ahead;
* a scripted server that answers only once it has read exactly what a test
  expects, with exactly the bytes the test gives: several replies in one
  segment (as Postfix does), replies cut in pieces, 354 although no recipient
  was accepted, replies withheld to make a timeout land in a chosen phase.

The outcome rules are the ones of tests/integration/test_smtp_transport.py
(which runs every reply class in both modes); here are the cases only
pipelining has.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest

from outbox_mailer.delivery import ComposedMessage, Delivery, Outcome, OutcomeKind, RefusedRecipient
from outbox_mailer.settings.transports import SmtpSettings
from outbox_mailer.transports.smtp import SmtpTransport
from tests.message_ids import claimed_message_id
from tests.smtp_server import running_smtp_server

pytestmark = pytest.mark.anyio

SENDER = "app@example.com"
TO = "to@example.com"
CC = "cc@example.com"
BODY = b"From: App <app@example.com>\r\nSubject: hello\r\n\r\nfirst line\r\n.a dot line\r\n.\r\nlast line\r\n"
WIRE_BODY = (  # dot-stuffed, ended by CRLF.CRLF
    b"From: App <app@example.com>\r\nSubject: hello\r\n\r\n"
    b"first line\r\n..a dot line\r\n..\r\nlast line\r\n.\r\n"
)
EHLO = (
    b"250-scripted.example.com\r\n250-PIPELINING\r\n250-SIZE 10000000\r\n250-8BITMIME\r\n"
    b"250-SMTPUTF8\r\n250 ENHANCEDSTATUSCODES\r\n"
)
OK_GROUP_1 = b"250 2.1.0 Ok\r\n250 2.1.5 Ok\r\n354 End data with <CR><LF>.<CR><LF>\r\n"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def message(*recipients: str, data: bytes = BODY, sender: str = SENDER) -> ComposedMessage:
    return ComposedMessage(sender, recipients or (TO,), "<abc@example.com>", data)


def delivery() -> Delivery:
    now = datetime.now(UTC)
    return Delivery(
        id=1, dedupe_key="key-1", claim_token=uuid.uuid4(), attempts=1, max_attempts=None,
        from_address=SENDER, to_addresses=(TO,), cc_addresses=(), bcc_addresses=(), reply_to=None,
        subject="hello", text_body="first line", html_body=None, headers={}, attachments=[], metadata={},
        transport=None, priority=0, scheduled_at=now, expires_at=None, created_at=now,
        message_id=claimed_message_id("key-1"),
    )  # fmt: skip


def settings(port: int, **overrides: Any) -> SmtpSettings:
    values: dict[str, Any] = dict(
        host="127.0.0.1", port=port, tls="none", helo_name="client.example.com", pool_size=1,
        connect_timeout_seconds=2.0, command_timeout_seconds=2.0, data_timeout_seconds=2.0,
    )  # fmt: skip
    values.update(overrides)
    return SmtpSettings(**values)


def assert_outcome(outcome: Outcome, kind: OutcomeKind, code: int | None, enhanced: str | None) -> None:
    assert (outcome.kind, outcome.reply_code, outcome.enhanced_code) == (kind, code, enhanced), outcome


def group(*recipients: str, options: bytes = b" SIZE=%d" % len(BODY)) -> bytes:
    """The pipelined MAIL/RCPT/DATA group the transport must write."""
    rcpts = b"".join(b"RCPT TO:<%s>\r\n" % r.encode() for r in recipients or (TO,))
    return b"MAIL FROM:<%s>%s\r\n%sDATA\r\n" % (SENDER.encode(), options, rcpts)


# -- the scripted server -----------------------------------------------------


@dataclass
class Step:
    until: bytes  # act once the input read since the previous step contains this
    reply: bytes | tuple[bytes, ...] = b""  # then send this (a tuple: in pieces, 20 ms apart)
    close: bool = False  # then close the connection
    delay: float = 0.0  # seconds to wait before replying


class _Connection(asyncio.Protocol):
    def __init__(self, steps: list[Step]) -> None:
        self.steps = deque([Step(b"\r\n", EHLO), *steps])
        self.pending = bytearray()
        self.chunks: list[bytes] = []  # each read, as it came
        self.turns: list[bytes] = []  # what each step consumed (turns[0]: EHLO)
        self.transport: asyncio.Transport | None = None
        self.busy = False

    @property
    def received(self) -> bytes:
        return b"".join(self.chunks)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(b"220 scripted.example.com ESMTP\r\n")

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)
        self.pending += data
        self._next()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def _next(self) -> None:
        while not self.busy and self.transport is not None:
            if not self.steps:  # script done: say goodbye politely, ignore the rest
                if b"QUIT\r\n" in self.pending:
                    self.transport.write(b"221 2.0.0 Bye\r\n")
                    self.transport.close()
                return
            step = self.steps[0]
            at = self.pending.find(step.until)
            if at < 0:
                return
            end = at + len(step.until)
            self.turns.append(bytes(self.pending[:end]))
            del self.pending[:end]
            self.steps.popleft()
            self.busy = True
            asyncio.get_running_loop().call_later(step.delay, self._act, step, 0)

    def _act(self, step: Step, piece: int) -> None:
        pieces = step.reply if isinstance(step.reply, tuple) else (step.reply,)
        if self.transport is None:
            return
        if pieces[piece]:
            self.transport.write(pieces[piece])
        if piece + 1 < len(pieces):
            asyncio.get_running_loop().call_later(0.02, self._act, step, piece + 1)
            return
        if step.close:
            self.transport.close()
            return
        self.busy = False
        self._next()


class ScriptedServer:
    """One script (list of steps after EHLO) per connection, in the order they are made."""

    def __init__(self, scripts: list[list[Step]]) -> None:
        self.scripts = deque(scripts)
        self.connections: list[_Connection] = []
        self.port = 0

    def _protocol(self) -> _Connection:
        conn = _Connection(self.scripts.popleft() if self.scripts else [])
        self.connections.append(conn)
        return conn


@contextlib.asynccontextmanager
async def scripted(
    *scripts: list[Step], **overrides: Any
) -> AsyncIterator[tuple[ScriptedServer, SmtpTransport]]:
    """A scripted server and a transport to it (settings ``overrides``), closed on exit."""
    state = ScriptedServer(list(scripts))
    server = await asyncio.get_running_loop().create_server(state._protocol, "127.0.0.1", 0)
    state.port = server.sockets[0].getsockname()[1]
    transport = SmtpTransport(settings(state.port, **overrides))
    try:
        yield state, transport
    finally:
        await transport.aclose()
        server.close()
        for conn in state.connections:
            if conn.transport is not None:
                conn.transport.close()


async def send(t: SmtpTransport, *recipients: str, **kw: Any) -> Outcome:
    return await t.send(message(*recipients, **kw), delivery())


# -- one write, replies in any framing ----------------------------------------


async def test_mail_rcpt_and_data_go_out_in_one_write() -> None:
    # The server answers nothing before it has DATA: a client waiting for the
    # MAIL reply would time out. All replies then come in one segment.
    replies = b"250 2.1.0 Ok\r\n250 2.1.5 Ok\r\n250 2.1.5 Ok\r\n354 End data with <CR><LF>.<CR><LF>\r\n"
    script = [Step(b"DATA\r\n", replies), Step(b"\r\n.\r\n", b"250 2.0.0 Ok: queued as 4ABC12\r\n")]
    async with scripted(script) as (server, t):
        outcome = await send(t, TO, CC)
    assert_outcome(outcome, OutcomeKind.SENT, 250, "2.0.0")
    assert outcome.provider_message_id == "4ABC12"
    [conn] = server.connections
    assert conn.turns[1] == group(TO, CC)
    assert group(TO, CC) in conn.chunks  # read in one piece: one write
    assert conn.turns[2] == WIRE_BODY  # dot-stuffed, ended by CRLF.CRLF


async def test_replies_cut_in_pieces_and_multiline() -> None:
    script = [
        Step(b"DATA\r\n", (b"250 2.1.0 O", b"k\r\n250-2.1.5 first\r\n250-2.1.5 second",
                            b"\r\n250 2.1.5 end\r\n354 go\r\n")),
        Step(b"\r\n.\r\n", (b"25", b"0 2.0.0 Ok: queued as 9XYZ77\r\n")),
    ]  # fmt: skip
    async with scripted(script) as (_server, t):
        outcome = await send(t)
    assert_outcome(outcome, OutcomeKind.SENT, 250, "2.0.0")
    assert outcome.provider_message_id == "9XYZ77"


async def test_aiosmtpd_had_rcpt_and_data_before_it_answered_mail() -> None:
    for pipelining, ahead in [(True, f"RCPT TO:<{TO}>\r\nRCPT TO:<{CC}>\r\nDATA\r\n".encode()), (False, b"")]:
        with running_smtp_server(pipelining=pipelining) as server:
            t = SmtpTransport(settings(server.port))
            assert (await send(t, TO, CC)).kind is OutcomeKind.SENT
            assert (await send(t, TO, CC)).kind is OutcomeKind.SENT  # again on the pooled connection
            await t.aclose()
            assert [(verb, queued) for _, verb, queued in server.queued_input if verb == "MAIL"] == [
                ("MAIL", ahead), ("MAIL", ahead)
            ]  # fmt: skip
            assert [m.data for m in server.accepted] == [BODY, BODY]
            assert server.connections == 1


async def test_large_body_through_flow_control() -> None:
    data = b"Subject: big\r\n\r\n" + b"".join(b"line %07d .\r\n.%d\r\n" % (i, i) for i in range(100_000))
    with running_smtp_server(pipelining=True) as server:
        t = SmtpTransport(settings(server.port, data_timeout_seconds=10.0))
        outcome = await send(t, data=data)
        await t.aclose()
    assert outcome.kind is OutcomeKind.SENT
    assert server.accepted[0].data == data


async def test_idempotency_header_goes_first() -> None:
    with running_smtp_server(pipelining=True) as server:
        t = SmtpTransport(settings(server.port, idempotency_header="Resend-Idempotency-Key"))
        assert (await send(t)).kind is OutcomeKind.SENT
        await t.aclose()
    assert server.accepted[0].data == b"Resend-Idempotency-Key: key-1\r\n" + BODY


# -- body framing and MAIL options -------------------------------------------


@pytest.mark.parametrize(
    ("data", "wire"),
    [
        (b"Subject: x\r\n\r\nno dots\r\n", b"Subject: x\r\n\r\nno dots\r\n.\r\n"),
        (b".first line\r\n\r\n.\r\n..two\r\nend\r\n", b"..first line\r\n\r\n..\r\n...two\r\nend\r\n.\r\n"),
        (b".only the first line has a dot\r\n", b"..only the first line has a dot\r\n.\r\n"),
        (b"Subject: x\r\n\r\nno final line break", b"Subject: x\r\n\r\nno final line break\r\n.\r\n"),
        (b"Subject: x\r\n\r\nends with a dot\r\n.", b"Subject: x\r\n\r\nends with a dot\r\n..\r\n.\r\n"),
        (b"bare\nline\rfeeds\n.dot\n", b"bare\r\nline\r\nfeeds\r\n..dot\r\n.\r\n"),
    ],
)
async def test_body_is_dot_stuffed_and_terminated(data: bytes, wire: bytes) -> None:
    script = [Step(b"DATA\r\n", OK_GROUP_1), Step(b"\r\n.\r\n", b"250 2.0.0 Ok\r\n")]
    async with scripted(script) as (server, t):
        assert (await send(t, data=data)).kind is OutcomeKind.SENT
    assert server.connections[0].turns[2] == wire


async def test_mail_options_size_8bitmime_smtputf8() -> None:
    data = "Subject: caf\u00e9\r\n\r\nd\u00e9j\u00e0 vu\r\n".encode()
    script = [Step(b"DATA\r\n", OK_GROUP_1), Step(b"\r\n.\r\n", b"250 2.0.0 Ok\r\n")]
    async with scripted(script) as (server, t):
        assert (await send(t, "j\u00fcrgen@example.com", data=data)).kind is OutcomeKind.SENT
    assert server.connections[0].turns[1] == (
        b"MAIL FROM:<app@example.com> SMTPUTF8 SIZE=%d BODY=8BITMIME\r\n" % len(data)
        + "RCPT TO:<j\u00fcrgen@example.com>\r\n".encode()
        + b"DATA\r\n"
    )


# -- refusals -----------------------------------------------------------------


NEXT_MESSAGE = [Step(b"DATA\r\n", OK_GROUP_1), Step(b"\r\n.\r\n", b"250 2.0.0 Ok\r\n")]


async def test_all_recipients_refused_but_354_sends_only_the_terminator() -> None:
    script = [
        Step(b"DATA\r\n", b"250 2.1.0 Ok\r\n550 5.1.1 no such user\r\n550 5.1.1 no such user\r\n"
                          b"354 go ahead\r\n"),
        Step(b".\r\n", b"554 5.5.1 Error: no valid recipients\r\n"),
        Step(b"RSET\r\n", b"250 2.0.0 Ok\r\n"),
        *NEXT_MESSAGE,
    ]  # fmt: skip
    async with scripted(script) as (server, t):
        outcome = await send(t, TO, CC)
        assert_outcome(outcome, OutcomeKind.PERMANENT, 550, "5.1.1")
        assert outcome.refused == (
            RefusedRecipient(TO, 550, "5.1.1 no such user"), RefusedRecipient(CC, 550, "5.1.1 no such user")
        )  # fmt: skip
        assert (await send(t)).kind is OutcomeKind.SENT  # the connection stayed in sync
    [conn] = server.connections
    assert conn.turns[2] == b".\r\n"  # no body, just the end of the empty data
    assert conn.received.count(b"first line") == 1  # only the second message's body


@pytest.mark.parametrize("data_reply", [b"503 5.5.1 Error: need RCPT command\r\n", b"354 go ahead\r\n"])
@pytest.mark.parametrize(
    ("mail_reply", "kind", "code", "enhanced"),
    [
        (b"550 5.7.1 sender rejected", OutcomeKind.PERMANENT, 550, "5.7.1"),
        (b"451 4.3.0 try again later", OutcomeKind.TRANSIENT, 451, "4.3.0"),
    ],
)
async def test_mail_refused_the_mail_reply_decides(
    mail_reply: bytes, kind: OutcomeKind, code: int, enhanced: str, data_reply: bytes
) -> None:
    steps = [Step(b"DATA\r\n", mail_reply + b"\r\n503 5.5.1 Error: need MAIL command\r\n" + data_reply)]
    if data_reply.startswith(b"354"):
        steps.append(Step(b".\r\n", b"503 5.5.1 Error: no valid recipients\r\n"))
    async with scripted([*steps, Step(b"RSET\r\n", b"250 2.0.0 Ok\r\n"), *NEXT_MESSAGE]) as (server, t):
        outcome = await send(t)
        assert_outcome(outcome, kind, code, enhanced)
        assert outcome.error == f"MAIL <{SENDER}>: {mail_reply.decode()}"
        assert outcome.refused == ()
        assert (await send(t)).kind is OutcomeKind.SENT
    [conn] = server.connections
    assert conn.received.count(b"first line") == 1


@pytest.mark.parametrize(
    ("reply", "kind", "code", "enhanced"),
    [
        (b"451 4.3.0 local error", OutcomeKind.TRANSIENT, 451, "4.3.0"),
        (b"554 5.5.1 Error: no valid recipients", OutcomeKind.PERMANENT, 554, "5.5.1"),
    ],
)
async def test_data_refused_after_accepted_recipients(
    reply: bytes, kind: OutcomeKind, code: int, enhanced: str
) -> None:
    script = [
        Step(b"DATA\r\n", b"250 2.1.0 Ok\r\n250 2.1.5 Ok\r\n" + reply + b"\r\n"),
        Step(b"RSET\r\n", b"250 2.0.0 Ok\r\n"),
        *NEXT_MESSAGE,
    ]
    async with scripted(script) as (server, t):
        outcome = await send(t)
        assert_outcome(outcome, kind, code, enhanced)
        assert outcome.error == f"DATA: {reply.decode()}"
        assert (await send(t)).kind is OutcomeKind.SENT
    assert server.connections[0].received.count(b"first line") == 1


async def test_partial_refusal_then_sent() -> None:
    script = [
        Step(b"DATA\r\n", b"250 2.1.0 Ok\r\n550 5.1.1 no such user\r\n250 2.1.5 Ok\r\n354 go\r\n"),
        Step(b"\r\n.\r\n", b"250 2.0.0 Ok: queued as 5QQ123\r\n"),
    ]
    async with scripted(script) as (_server, t):
        outcome = await send(t, "bad@example.com", TO)
    assert_outcome(outcome, OutcomeKind.SENT, 250, "2.0.0")
    assert outcome.refused == (RefusedRecipient("bad@example.com", 550, "5.1.1 no such user"),)
    assert outcome.error == "some recipients refused: RCPT <bad@example.com>: 550 5.1.1 no such user"


@pytest.mark.parametrize(
    ("replies", "phase", "refused"),
    [
        (b"421 4.3.2 Service shutting down\r\n", f"MAIL <{SENDER}>", ()),
        (b"250 2.1.0 Ok\r\n421 4.3.2 Service shutting down\r\n", f"RCPT <{TO}>",
         (RefusedRecipient(TO, 421, "4.3.2 Service shutting down"),)),
        (b"250 2.1.0 Ok\r\n250 2.1.5 Ok\r\n421 4.3.2 Service shutting down\r\n", "DATA", ()),
    ],
)  # fmt: skip
async def test_421_in_the_middle_drops_the_connection(
    replies: bytes, phase: str, refused: tuple[RefusedRecipient, ...]
) -> None:
    async with scripted([Step(b"DATA\r\n", replies, close=True)], NEXT_MESSAGE) as (server, t):
        outcome = await send(t)
        assert_outcome(outcome, OutcomeKind.TRANSIENT, 421, "4.3.2")
        assert outcome.error == f"{phase}: 421 4.3.2 Service shutting down"
        assert outcome.refused == refused
        assert (await send(t)).kind is OutcomeKind.SENT
    assert len(server.connections) == 2
    assert b"RSET" not in server.connections[0].received
    assert b"first line" not in server.connections[0].received


# -- lost connections and timeouts ----------------------------------------------


async def test_server_closes_after_reading_the_group_on_a_fresh_connection() -> None:
    async with scripted([Step(b"DATA\r\n", close=True)], NEXT_MESSAGE) as (server, t):
        outcome = await send(t)
    assert_outcome(outcome, OutcomeKind.TRANSIENT, None, None)
    assert (outcome.error or "").startswith(f"MAIL <{SENDER}>: ")
    assert outcome.charge_attempt
    assert len(server.connections) == 1  # a fresh connection is not retried


async def test_reused_connection_closed_at_the_group_is_retried_once() -> None:
    async with scripted([*NEXT_MESSAGE, Step(b"DATA\r\n", close=True)], NEXT_MESSAGE) as (server, t):
        assert (await send(t)).kind is OutcomeKind.SENT
        assert (await send(t)).kind is OutcomeKind.SENT
    assert len(server.connections) == 2
    assert server.connections[1].turns[1] == group()


async def test_lost_before_354_is_transient_after_the_body_ambiguous() -> None:
    before = [Step(b"DATA\r\n", b"250 2.1.0 Ok\r\n250 2.1.5 Ok\r\n", close=True)]
    after = [Step(b"DATA\r\n", OK_GROUP_1), Step(b"\r\n.\r\n", close=True)]
    async with scripted(before, after) as (server, t):
        first, second = await send(t), await send(t)
    assert_outcome(first, OutcomeKind.TRANSIENT, None, None)
    assert (first.error or "").startswith("DATA: ")
    assert_outcome(second, OutcomeKind.AMBIGUOUS, None, None)
    assert (second.error or "").startswith("DATA: ")
    assert b"first line" not in server.connections[0].received
    assert server.connections[1].turns[2] == WIRE_BODY


# Replies given before the transport stops waiting, then silence: which phase it was in.
PHASES = [
    pytest.param([Step(b"DATA\r\n")], f"MAIL <{SENDER}>", False, id="MAIL"),
    pytest.param([Step(b"DATA\r\n", b"250 2.1.0 Ok\r\n")], f"RCPT <{TO}>", False, id="RCPT"),
    pytest.param([Step(b"DATA\r\n", b"250 2.1.0 Ok\r\n250 2.1.5 Ok\r\n")], "DATA", False, id="DATA-354"),
    pytest.param([Step(b"DATA\r\n", OK_GROUP_1)], "DATA", True, id="after-body"),
]


@pytest.mark.parametrize(("script", "phase", "body_sent"), PHASES)
async def test_reply_timeout_in_each_phase(script: list[Step], phase: str, body_sent: bool) -> None:
    overrides = dict(command_timeout_seconds=0.3, data_timeout_seconds=0.3)
    async with scripted(script, NEXT_MESSAGE, **overrides) as (server, t):
        with anyio.fail_after(1.5):
            outcome = await send(t)
        assert (await send(t)).kind is OutcomeKind.SENT  # on a new connection
    assert outcome.kind is (OutcomeKind.AMBIGUOUS if body_sent else OutcomeKind.TRANSIENT), outcome
    assert (outcome.error or "").startswith(f"{phase}: "), outcome
    assert (WIRE_BODY in server.connections[0].received) is body_sent
    assert len(server.connections) == 2


@pytest.mark.parametrize(("script", "phase", "body_sent"), PHASES)
async def test_send_timeout_in_each_phase(script: list[Step], phase: str, body_sent: bool) -> None:
    overrides = dict(command_timeout_seconds=5.0, data_timeout_seconds=0.4, send_timeout_seconds=0.4)
    async with scripted(script, NEXT_MESSAGE, **overrides) as (server, t):
        with anyio.fail_after(1.5):
            outcome = await send(t)
        assert (await send(t)).kind is OutcomeKind.SENT
    assert outcome.kind is (OutcomeKind.AMBIGUOUS if body_sent else OutcomeKind.TRANSIENT), outcome
    assert (outcome.error or "").startswith(f"{phase}: "), outcome
    assert len(server.connections) == 2


async def test_malformed_reply_drops_the_connection() -> None:
    async with scripted([Step(b"DATA\r\n", b"250 2.1.0 Ok\r\nhello there\r\n")], NEXT_MESSAGE) as (server, t):
        outcome = await send(t)
        assert (await send(t)).kind is OutcomeKind.SENT
    assert_outcome(outcome, OutcomeKind.TRANSIENT, None, None)
    assert (outcome.error or "").startswith(f"RCPT <{TO}>: ") and "hello there" in (outcome.error or "")
    assert len(server.connections) == 2


async def test_unsolicited_reply_on_an_idle_connection_retires_it() -> None:
    # The server says goodbye to an idle client without closing yet: that
    # reply must not be taken for the next message's MAIL reply.
    goodbye = (b"250 2.0.0 Ok\r\n", b"421 4.4.2 idle timeout\r\n")  # 20 ms apart
    first = [Step(b"DATA\r\n", OK_GROUP_1), Step(b"\r\n.\r\n", goodbye)]
    async with scripted(first, NEXT_MESSAGE) as (server, t):
        assert (await send(t)).kind is OutcomeKind.SENT
        await anyio.sleep(0.1)
        assert_outcome(await send(t), OutcomeKind.SENT, 250, "2.0.0")
    assert len(server.connections) == 2


async def test_quit_on_close_and_check() -> None:
    probe = [
        Step(b"MAIL FROM:<postmaster@client.example.com>\r\n", b"250 2.1.0 Ok\r\n"),
        Step(b"RCPT TO:<outbox-mailer-check@example.com>\r\n", b"250 2.1.5 Ok\r\n"),
        Step(b"RSET\r\n", b"250 2.0.0 Ok\r\n"),
    ]
    async with scripted(probe) as (server, t):
        line = await t.check()
        assert line.startswith(f"127.0.0.1:{server.port} 220 scripted.example.com ESMTP")
        assert line.endswith("probe MAIL/RCPT accepted)")
        assert b"DATA" not in server.connections[0].received
        await anyio.sleep(0.05)
    assert server.connections[0].pending == b"QUIT\r\n"
