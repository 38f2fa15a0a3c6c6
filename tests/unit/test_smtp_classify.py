"""SMTP reply classification: reply code decides, enhanced code is parsed from the text.

Also replies about our account (authentication, relaying), the merging of follow-up
transactions' results (452 too many recipients), the reading of pipelined replies and the framing of the message body (smtp/wire.py).
"""

from __future__ import annotations

import asyncio
import random

import pytest
from aiosmtplib.protocol import PERIOD_REGEX, normalize_message_line_endings

from outbox_mailer.delivery import ComposedMessage, Outcome, OutcomeKind, RefusedRecipient
from outbox_mailer.providers.seam import one_line
from outbox_mailer.transports.smtp.envelope import envelope_problem
from outbox_mailer.transports.smtp.replies import (
    accepted,
    account_refusal,
    all_refused,
    follow_up,
    queue_id,
    refusal,
    with_refused,
)
from outbox_mailer.transports.smtp.transport import classify_reply, probe_recipient
from outbox_mailer.transports.smtp.wire import Reply, Wire, WireError, frame_body


@pytest.mark.parametrize(
    ("code", "text", "kind", "enhanced"),
    [
        (250, "2.0.0 Ok: queued as 4ABC12", OutcomeKind.SENT, "2.0.0"),
        (250, "OK", OutcomeKind.SENT, None),
        (251, "2.1.5 will forward", OutcomeKind.SENT, "2.1.5"),
        (421, "4.3.2 Service shutting down", OutcomeKind.TRANSIENT, "4.3.2"),
        (421, "mx.example.com closing connection", OutcomeKind.TRANSIENT, None),
        (450, "4.2.0 greylisted, come back later", OutcomeKind.TRANSIENT, "4.2.0"),
        (451, "4.3.0 local error", OutcomeKind.TRANSIENT, "4.3.0"),
        (452, "4.5.3 too many recipients", OutcomeKind.TRANSIENT, "4.5.3"),
        (550, "5.1.1 no such user", OutcomeKind.PERMANENT, "5.1.1"),
        (552, "5.3.4 message too big", OutcomeKind.PERMANENT, "5.3.4"),
        (554, "5.7.1 rejected as spam", OutcomeKind.PERMANENT, "5.7.1"),
        (554, "Transaction failed", OutcomeKind.PERMANENT, None),
        # The reply code decides, even when the enhanced code disagrees.
        (550, "4.2.2 mailbox full", OutcomeKind.PERMANENT, "4.2.2"),
        # Unexpected codes neither accept nor refuse for good.
        (354, "End data with <CR><LF>.<CR><LF>", OutcomeKind.TRANSIENT, None),
        (-1, "Malformed SMTP response line", OutcomeKind.TRANSIENT, None),
    ],
)
def test_classify_reply(code: int, text: str, kind: OutcomeKind, enhanced: str | None) -> None:
    assert classify_reply(code, text) == (kind, enhanced)


@pytest.mark.parametrize(
    ("text", "enhanced"),
    [
        ("5.1.1", "5.1.1"),  # nothing after the code
        ("5.123.456 long subject and detail", "5.123.456"),
        ("5.1.1\nsecond line of a multi-line reply", "5.1.1"),
        ("  5.1.1 leading blanks", "5.1.1"),
        ("5.1.1234 detail too long", None),
        ("5.1 too short", None),
        ("1.2.3 class must be 2, 4 or 5", None),
        ("5.1.1.1 extra part", None),
        ("x5.1.1 glued", None),
        ("5.1.1: punctuation glued", None),
        ("user 5.1.1 not first", None),
        ("", None),
    ],
)
def test_enhanced_code_is_the_first_word(text: str, enhanced: str | None) -> None:
    assert classify_reply(550, text)[1] == enhanced


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2.0.0 Ok: queued as 4XYZ12abc", "4XYZ12abc"),  # Postfix
        ("2.0.0 Ok: queued as <4XYZ12abc>", "4XYZ12abc"),
        ("OK id=1kq2rT-0003Xy-7B", "1kq2rT-0003Xy-7B"),  # Exim
        ("Ok 0100018c3b5a7e2f-2c8e7a1b-9d3f-4c2e-8b1a-5e6f7a8b9c0d-000000",  # Amazon SES: its events' messageId
         "0100018c3b5a7e2f-2c8e7a1b-9d3f-4c2e-8b1a-5e6f7a8b9c0d-000000"),
        ("2.0.0 x8ABC123 Message accepted for delivery", "x8ABC123"),  # sendmail
        ("2.0.0 OK  1700000000 a1-20020a17.123 - gsmtp", "1700000000"),
        ("Great success", None),  # Mailgun: its events carry our Message-ID instead
        ("OK", None),
        ("2.0.0 OK", None),
        ("Message accepted for delivery", None),
    ],
)
def test_queue_id_only_when_the_reply_has_one(text: str, expected: str | None) -> None:
    assert queue_id(text) == expected


def _message(sender: str = "app@example.com", *recipients: str) -> ComposedMessage:
    return ComposedMessage(sender, recipients or ("to@example.com",), "<id@example.com>", b"x\r\n")


@pytest.mark.parametrize(
    "message",
    [
        _message("app@example.com", "to@example.com\r\nRCPT TO:<evil@example.com>"),
        _message("app@example.com\r\nRCPT TO:<evil@example.com>"),
        _message("app@example.com", "Name <to@example.com>"),
        _message("app@example.com", "a@example.com, b@example.com"),
        _message("app@example.com", "to@example.com SIZE=1"),
        _message("app@example.com", "nobody"),
        ComposedMessage("app@example.com", (), "<id@example.com>", b"x\r\n"),
    ],
)
def test_envelope_problems_are_caught_before_any_io(message: ComposedMessage) -> None:
    assert envelope_problem(message) is not None


def test_plain_envelopes_pass() -> None:
    assert envelope_problem(_message("", "to@example.com")) is None  # null reverse-path
    assert envelope_problem(_message("app@example.com", "a@example.com", '"john doe"@example.com')) is None


# -- pipelined replies and the message body (smtp/wire.py, fed by hand: no sockets) --

REPLIES = (
    b"250 2.1.0 Ok\r\n"
    b"250-2.1.5 first line\r\n250-2.1.5 second line\r\n250 2.1.5 last line\r\n"
    b"354 End data with <CR><LF>.<CR><LF>\r\n"
    b"250\r\n"  # no text at all
    b"550 5.1.1 bare LF ending\n"
)
PARSED = [
    Reply(250, "2.1.0 Ok"),
    Reply(250, "2.1.5 first line\n2.1.5 second line\n2.1.5 last line"),
    Reply(354, "End data with <CR><LF>.<CR><LF>"),
    Reply(250, ""),
    Reply(550, "5.1.1 bare LF ending"),
]


class _FakeTransport:
    def __init__(self) -> None:
        self.protocol: object = None
        self.written: list[bytes] = []
        self.closing = False

    def set_protocol(self, protocol: object) -> None:
        self.protocol = protocol

    def is_closing(self) -> bool:
        return self.closing

    def write(self, data: bytes) -> None:
        self.written.append(data)


class _PreviousProtocol:
    def __init__(self) -> None:
        self.lost: list[Exception | None] = []

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.append(exc)


def _wire() -> tuple[Wire, _FakeTransport, _PreviousProtocol]:
    transport, previous = _FakeTransport(), _PreviousProtocol()
    wire = Wire(transport, previous)  # type: ignore[arg-type]
    assert transport.protocol is wire  # it took the connection over
    return wire, transport, previous


def _drain(wire: Wire) -> list[Reply]:
    async def read() -> list[Reply]:
        return [await wire.reply(0.01) for _ in PARSED]

    return asyncio.run(read())


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 13, len(REPLIES)])
def test_replies_are_queued_whatever_the_segments(size: int) -> None:
    wire, _, _ = _wire()
    for i in range(0, len(REPLIES), size):
        wire.data_received(REPLIES[i : i + size])
    assert _drain(wire) == PARSED
    assert wire.idle


def test_half_a_reply_is_not_idle_and_a_timeout_is_final() -> None:
    wire, transport, _ = _wire()
    wire.data_received(b"250-2.1.5 first line\r\n")  # the rest never comes
    assert not wire.idle

    async def read() -> None:
        await wire.reply(0.01)

    with pytest.raises(WireError, match="Timed out") as info:
        asyncio.run(read())
    assert not info.value.lost
    with pytest.raises(WireError):
        wire.write(b"RSET\r\n")  # out of sync for good
    assert transport.written == []


@pytest.mark.parametrize(
    "data",
    [
        b"hello\r\n", b"25 short\r\n", b"\r\n", b"2x0 letters\r\n",
        b"250 " + b"x" * 9000 + b"\r\n",  # a line too long
        b"2" * 9000,  # no line end in sight
    ],  # fmt: skip
)
def test_garbage_fails_the_wire(data: bytes) -> None:
    wire, _, _ = _wire()
    wire.data_received(data)
    assert wire.failure is not None and not wire.failure.lost
    assert not wire.idle


def test_replies_before_the_end_of_the_connection_are_still_read() -> None:
    wire, _, previous = _wire()
    wire.data_received(b"250 2.1.0 Ok\r\n421 4.3.2 closing\r\n")
    wire.eof_received()
    wire.connection_lost(None)
    assert previous.lost == [None]  # aiosmtplib learns the connection is gone

    async def read() -> list[Reply]:
        return [await wire.reply(1.0), await wire.reply(1.0)]

    assert asyncio.run(read()) == [Reply(250, "2.1.0 Ok"), Reply(421, "4.3.2 closing")]
    assert wire.finished
    with pytest.raises(WireError) as info:
        asyncio.run(read())
    assert info.value.lost


@pytest.mark.parametrize(
    ("data", "framed"),
    [
        (b"a\r\nb\r\n", b"a\r\nb\r\n.\r\n"),
        (b"a\r\nb", b"a\r\nb\r\n.\r\n"),
        (b"", b"\r\n.\r\n"),
        (b".\r\n", b"..\r\n.\r\n"),
        (b"x\r\n.\r\n..y\r\n", b"x\r\n..\r\n...y\r\n.\r\n"),
        (b"bare\nlf\n.dot\rcr\r", b"bare\r\nlf\r\n..dot\r\ncr\r\n.\r\n"),
    ],
)
def test_frame_body(data: bytes, framed: bytes) -> None:
    assert frame_body(data) == framed


def test_frame_body_matches_aiosmtplib_on_random_input() -> None:
    """aiosmtplib's own DATA framing is the oracle (line endings normalised, then dot-stuffed)."""
    rng = random.Random(2920)
    for _ in range(3000):
        data = bytes(rng.choice(b".\r\na") for _ in range(rng.randrange(12)))
        expected = PERIOD_REGEX.sub(b"..", normalize_message_line_endings(data)) + b".\r\n"
        assert frame_body(data) == expected, data


# -- replies about our account ------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "text", "envelope", "account"),
    [
        (530, "5.7.0 Authentication required", True, True),
        (530, "5.7.57 SMTP; Client was not authenticated to send anonymous mail", True, True),
        (530, "5.7.0 Authentication required", False, True),  # 530 anywhere, DATA too
        (554, "5.7.1 <to@example.com>: Relay access denied", True, True),
        (550, "5.7.1 Relaying denied", True, True),
        (550, "relay not permitted", True, True),
        (454, "4.7.1 <to@example.com>: Relay access denied", True, True),
        (550, "5.7.54 SMTP; Unable to relay recipient in non-accepted domain", True, True),
        (550, "we do not relay for example.org", True, True),
        (550, "5.7.0 Authentication is required to send mail", True, True),
        (553, "5.7.1 you must authenticate first", True, True),
        (550, "5.7.1 Message refused by recipient's policy", True, False),
        (550, "5.7.1 <x@example.com>: Recipient address rejected: Access denied", True, False),
        (550, "5.1.1 <x@example.com>: Recipient address rejected: User unknown in relay recipient table",
         True, False),  # subject 1: about the recipient
        (550, "5.1.1 user unknown", True, False),
        (550, "5.7.1 relay.example.com: sender denied", True, False),  # a host name is not "relay ... denied"
        (554, "5.7.1 Relay access denied", False, False),  # after DATA: only 530 counts
        (250, "2.1.5 relay access denied", True, False),
    ],
)  # fmt: skip
def test_account_refusal(code: int, text: str, envelope: bool, account: bool) -> None:
    assert account_refusal(code, text, envelope=envelope) is account


def test_account_refusal_of_mail_pauses_uncharged() -> None:
    outcome = refusal("MAIL <app@example.com>", 530, "5.7.0 Authentication required")
    assert outcome.kind is OutcomeKind.TRANSIENT and not outcome.charge_attempt
    assert outcome.pause_seconds == 300.0
    assert (outcome.reply_code, outcome.enhanced_code) == (530, "5.7.0")
    assert (outcome.error or "").startswith("MAIL <app@example.com>: 530 5.7.0 Authentication required: ")


def test_every_recipient_refused_one_for_relaying_pauses() -> None:
    refused = [RefusedRecipient("a@example.org", 450, "4.2.1 busy"),
               RefusedRecipient("b@example.org", 554, "5.7.1 Relay access denied")]  # fmt: skip
    outcome = all_refused(refused)
    assert outcome.pause_seconds == 300.0 and not outcome.charge_attempt
    assert outcome.reply_code == 554 and outcome.refused == tuple(refused)
    plain = all_refused([RefusedRecipient("a@example.org", 550, "5.1.1 user unknown")])
    assert plain.kind is OutcomeKind.PERMANENT and plain.pause_seconds is None and plain.charge_attempt


@pytest.mark.parametrize(
    ("sender", "recipient"),
    [("app@example.com", "outbox-mailer-check@example.net"), ("app@EXAMPLE.COM", "outbox-mailer-check@example.net"),
     ("postmaster@client.example.com", "outbox-mailer-check@example.com"),
     ("noreply@shop.example", "outbox-mailer-check@example.com")],
)  # fmt: skip
def test_probe_recipient_is_never_at_the_senders_domain(sender: str, recipient: str) -> None:
    assert probe_recipient(sender) == recipient


# -- follow-up transactions (452 too many recipients) ----------------------------------


FOLLOW = ("c@example.com", "d@example.com")


def test_follow_up_sent_keeps_its_refusals() -> None:
    refused = [RefusedRecipient("d@example.com", 452, "4.5.3 Too many recipients")]
    assert follow_up(FOLLOW, accepted(250, "2.0.0 Ok", refused)) == (["c@example.com"], refused)


def test_follow_up_broken_before_the_body_leaves_code_none() -> None:
    outcome = Outcome.transient("RCPT <d@example.com>: Connection lost",
                                refused=(RefusedRecipient("c@example.com", 550, "5.1.1 unknown"),))  # fmt: skip
    assert follow_up(FOLLOW, outcome) == ([], [
        RefusedRecipient("c@example.com", 550, "5.1.1 unknown"),
        RefusedRecipient("d@example.com", None, "RCPT <d@example.com>: Connection lost")])


def test_follow_up_lost_after_the_body_is_unknown() -> None:
    outcome = Outcome.ambiguous("DATA: Connection lost; the server may have accepted the message")
    _, refused = follow_up(FOLLOW, outcome)
    assert [(r.address, r.reply_code, r.unknown, r.permanent) for r in refused] == [
        ("c@example.com", None, True, False), ("d@example.com", None, True, False)]


def test_follow_up_refused_at_data_takes_the_data_reply() -> None:
    _, refused = follow_up(FOLLOW, refusal("DATA", 554, "5.6.0 rejected"))
    assert [(r.reply_code, r.permanent) for r in refused] == [(554, True), (554, True)]


def test_with_refused_lists_every_refusal_in_the_error() -> None:
    first = accepted(250, "2.0.0 Ok: queued as AAA111", [])
    refused = [RefusedRecipient("a@example.com", 450, "4.2.1 busy"),
               RefusedRecipient("b@example.com", None, "RCPT <b@example.com>: Connection lost"),
               RefusedRecipient("c@example.com", None, "DATA: timed out", unknown=True)]  # fmt: skip
    outcome = with_refused(first, refused)
    assert outcome.kind is OutcomeKind.SENT and outcome.provider_message_id == "AAA111"
    assert outcome.refused == tuple(refused)
    assert outcome.error == (
        "some recipients refused: RCPT <a@example.com>: 450 4.2.1 busy; "
        "<b@example.com>: not sent (RCPT <b@example.com>: Connection lost); "
        "<c@example.com>: may have been accepted (DATA: timed out)"
    )
    assert with_refused(first, []).error is None


@pytest.mark.parametrize(
    "text", ["2.0.0 Ok", "2.0.0 Ok: queued as 4XYZ9ABC", "Ok <0100018f-abc@email.amazonses.com>", " a\n  reply ", ""]
)
def test_accepted_is_sent_with_the_reply_classified(text: str) -> None:
    assert accepted(250, text, []) == Outcome.sent(
        provider_message_id=queue_id(text), reply=one_line(f"250 {text}"), reply_code=250,
        enhanced_code=classify_reply(250, text)[1],
    )
