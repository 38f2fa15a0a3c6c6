"""The demo SMTP sink against aiosmtplib as a real client."""

from __future__ import annotations

import asyncio

import aiosmtplib
import pytest

from outbox_mailer.devtools.sink import (
    ReceivedMessage,
    SmtpSink,
    always_refuse,
    combine,
    fail_first,
)

pytestmark = pytest.mark.anyio

MESSAGE = (
    b"From: a@example.org\r\n"
    b"To: b@example.org\r\n"
    b"Subject: hi\r\n"
    b"\r\n"
    b"first line\r\n"
    b".starts with a dot\r\n"
    b"..two dots\r\n"
    b".\r\n"
    b"caf\xc3\xa9 8bit\r\n"
)


def client(sink: SmtpSink) -> aiosmtplib.SMTP:
    return aiosmtplib.SMTP(hostname=sink.host, port=sink.port, start_tls=False, use_tls=False,
                           timeout=5)


async def test_message_received_with_exact_envelope_and_bytes() -> None:
    async with SmtpSink() as sink:
        assert sink.host == "127.0.0.1" and sink.port > 0
        async with client(sink) as smtp:
            assert (await smtp.ehlo()).code == 250
            assert smtp.supports_extension("8bitmime")
            assert smtp.supports_extension("size")
            assert not smtp.supports_extension("starttls")
            errors, _ = await smtp.sendmail("a@example.org", ["b@example.org", "c@example.org"],
                                            MESSAGE)
        assert errors == {}
        assert sink.messages == [
            ReceivedMessage("a@example.org", ["b@example.org", "c@example.org"], MESSAGE)
        ]


async def test_lone_lf_and_missing_final_newline_arrive_as_crlf() -> None:
    async with SmtpSink() as sink:
        async with client(sink) as smtp:
            await smtp.sendmail("a@example.org", ["b@example.org"], b"Subject: x\n\nbody\n.dot")
        assert sink.messages[0].data == b"Subject: x\r\n\r\nbody\r\n.dot\r\n"


async def test_rcpt_refused_with_rule_code() -> None:
    async with SmtpSink(rules=always_refuse("bad", 550, "5.1.1 No such user")) as sink:
        async with client(sink) as smtp:
            await smtp.mail("a@example.org")
            with pytest.raises(aiosmtplib.SMTPRecipientRefused) as info:
                await smtp.rcpt("bad@example.org")
            assert info.value.code == 550
            assert "No such user" in info.value.message
            assert (await smtp.rcpt("good@example.org")).code == 250
            await smtp.data(b"Subject: x\r\n\r\nhi\r\n")
        assert [(m.sender, m.recipients) for m in sink.messages] == [
            ("a@example.org", ["good@example.org"])
        ]


async def test_sendmail_all_recipients_refused() -> None:
    async with SmtpSink(rules=always_refuse("bad", 451, "4.3.0 try later")) as sink:
        async with client(sink) as smtp:
            with pytest.raises(aiosmtplib.SMTPRecipientsRefused) as info:
                await smtp.sendmail("a@example.org", ["bad@example.org"], b"x\r\n")
            assert [e.code for e in info.value.recipients] == [451]
            # partial refusal: the good recipient still gets the message
            errors, _ = await smtp.sendmail("a@example.org", ["bad@x.org", "ok@x.org"], b"y\r\n")
            assert errors["bad@x.org"].code == 451
        assert sink.messages == [ReceivedMessage("a@example.org", ["ok@x.org"], b"y\r\n")]


async def test_fail_first_fails_n_times_then_accepts() -> None:
    rule = fail_first(2, "flaky", 450, "4.2.1 busy")
    async with SmtpSink(rules=rule) as sink:
        async with client(sink) as smtp:
            await smtp.mail("a@example.org")
            assert (await smtp.rcpt("steady@example.org")).code == 250
            codes = []
            for _ in range(4):
                try:
                    codes.append((await smtp.rcpt("flaky@example.org")).code)
                except aiosmtplib.SMTPRecipientRefused as e:
                    codes.append(e.code)
            assert codes == [450, 450, 250, 250]
            await smtp.data(b"x\r\n")
        assert sink.messages[0].recipients == [
            "steady@example.org", "flaky@example.org", "flaky@example.org"
        ]


async def test_421_closes_the_connection() -> None:
    async with SmtpSink(rules=fail_first(2, "b@", 421, "4.3.2 shutting down")) as sink:
        # the sink itself hangs up after a 421
        reader, writer = await asyncio.open_connection(sink.host, sink.port)
        assert (await read_reply(reader)).startswith(b"220 ")
        for cmd in (b"EHLO me\r\n", b"MAIL FROM:<a@x.org>\r\n", b"RCPT TO:<b@x.org>\r\n"):
            writer.write(cmd)
            last = await read_reply(reader)
        assert last == b"421 4.3.2 shutting down\r\n"
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
        async with client(sink) as smtp:
            await smtp.mail("a@x.org")
            with pytest.raises(aiosmtplib.SMTPRecipientRefused) as info:
                await smtp.rcpt("b@x.org")
            assert info.value.code == 421
            assert not smtp.is_connected
        async with client(sink) as smtp:
            await smtp.sendmail("a@x.org", ["b@x.org"], b"third time\r\n")
        assert sink.messages == [ReceivedMessage("a@x.org", ["b@x.org"], b"third time\r\n")]


async def test_mail_rule_and_combine() -> None:
    rules = combine(
        always_refuse("spammer", 553, "5.7.1 go away", command="MAIL"),
        fail_first(1, "x", 450, "4.2.0 first"),
        always_refuse("x", 550, "5.0.0 second"),
    )
    assert rules("RCPT", "nothing") is None
    async with SmtpSink(rules=rules) as sink:
        async with client(sink) as smtp:
            with pytest.raises(aiosmtplib.SMTPSenderRefused) as info:
                await smtp.mail("spammer@example.org")
            assert info.value.code == 553
            await smtp.mail("ok@example.org")
            codes = []
            for _ in range(2):
                with pytest.raises(aiosmtplib.SMTPRecipientRefused) as rinfo:
                    await smtp.rcpt("x@example.org")
                codes.append(rinfo.value.code)
            assert codes == [450, 550]
        assert sink.messages == []


async def test_data_rule_refuses_with_554() -> None:
    rule = always_refuse("doomed", 554, "5.6.0 content rejected", command="DATA")
    seen: list[tuple[str, str]] = []

    def spy(cmd: str, arg: str) -> tuple[int, str] | None:
        seen.append((cmd, arg))
        return rule(cmd, arg)

    async with SmtpSink(rules=spy) as sink:
        async with client(sink) as smtp:
            with pytest.raises(aiosmtplib.SMTPDataError) as info:
                await smtp.sendmail("a@x.org", ["ok@x.org", "doomed@x.org"], b"x\r\n")
            assert info.value.code == 554
            # the connection is still usable after the refusal
            await smtp.sendmail("a@x.org", ["ok@x.org"], b"y\r\n")
        assert seen == [
            ("MAIL", "a@x.org"), ("RCPT", "ok@x.org"), ("RCPT", "doomed@x.org"),
            ("DATA", "ok@x.org,doomed@x.org"),
            ("MAIL", "a@x.org"), ("RCPT", "ok@x.org"), ("DATA", "ok@x.org"),
        ]
        assert sink.messages == [ReceivedMessage("a@x.org", ["ok@x.org"], b"y\r\n")]


async def test_several_messages_over_one_connection() -> None:
    async with SmtpSink() as sink:
        async with client(sink) as smtp:
            for i in range(5):
                await smtp.sendmail(f"s{i}@x.org", [f"r{i}@x.org"], f"Subject: {i}\r\n\r\n{i}\r\n")
                assert (await smtp.noop()).code == 250
            assert (await smtp.rset()).code == 250
        assert [(m.sender, m.recipients, m.data) for m in sink.messages] == [
            (f"s{i}@x.org", [f"r{i}@x.org"], f"Subject: {i}\r\n\r\n{i}\r\n".encode())
            for i in range(5)
        ]


async def test_oversize_message_gets_552() -> None:
    async with SmtpSink(max_message_size=1000) as sink:
        async with client(sink) as smtp:
            await smtp.ehlo()
            assert smtp.esmtp_extensions["size"] == "1000"
            big = b"Subject: big\r\n\r\n" + b"x" * 70 + b"\r\n"
            big *= 20
            # declared with SIZE= by sendmail: refused at MAIL
            with pytest.raises(aiosmtplib.SMTPSenderRefused) as info:
                await smtp.sendmail("a@x.org", ["b@x.org"], big)
            assert info.value.code == 552
            # undeclared: refused at the end of DATA, connection stays in sync
            await smtp.mail("a@x.org")
            await smtp.rcpt("b@x.org")
            with pytest.raises(aiosmtplib.SMTPDataError) as dinfo:
                await smtp.data(big)
            assert dinfo.value.code == 552
            await smtp.sendmail("a@x.org", ["b@x.org"], b"small\r\n")
        assert sink.messages == [ReceivedMessage("a@x.org", ["b@x.org"], b"small\r\n")]


async def raw_session(sink: SmtpSink, lines: list[bytes]) -> list[bytes]:
    """Send each line, collect the (possibly multi-line) reply to each."""
    reader, writer = await asyncio.open_connection(sink.host, sink.port)
    replies = [await read_reply(reader)]
    for line in lines:
        writer.write(line)
        await writer.drain()
        replies.append(await read_reply(reader))
    writer.close()
    await writer.wait_closed()
    return replies


async def read_reply(reader: asyncio.StreamReader) -> bytes:
    out = b""
    while True:
        line = await asyncio.wait_for(reader.readline(), 5)
        assert line.endswith(b"\r\n"), line
        out += line
        if line[3:4] == b" ":
            return out


async def test_sequence_unknown_and_long_lines() -> None:
    async with SmtpSink() as sink:
        replies = await raw_session(sink, [
            b"MAIL FROM:<a@x.org>\r\n",       # before HELO
            b"HELO me\r\n",
            b"RCPT TO:<b@x.org>\r\n",         # before MAIL
            b"DATA\r\n",                      # before RCPT
            b"FROB\r\n",
            b"NOOP " + b"x" * 5000 + b"\r\n",  # too long
            b"MAIL FROM:<>\r\n",              # null sender allowed
            b"MAIL FROM:<a@x.org>\r\n",       # nested MAIL
            b"RCPT TO:<b@x.org>\r\n",
            b"DATA\r\n",
            b"..x\r\n" + b"y" * 5000 + b"\r\n.\r\n",  # long line inside DATA
            b"QUIT\r\n",
        ])
        codes = [int(r[:3]) for r in replies]
        assert codes == [220, 503, 250, 503, 503, 502, 500, 250, 503, 250, 354, 500, 221]
        assert sink.messages == []


async def test_stop_closes_listener_and_connections() -> None:
    sink = SmtpSink()
    await sink.start()
    smtp = client(sink)
    await smtp.connect()
    await smtp.sendmail("a@x.org", ["b@x.org"], b"x\r\n")
    reader, writer = await asyncio.open_connection(sink.host, sink.port)
    assert (await read_reply(reader)).startswith(b"220 ")
    await asyncio.wait_for(sink.stop(), 5)
    # the open raw connection sees EOF
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()
    # the client's open connection is gone
    with pytest.raises(aiosmtplib.SMTPServerDisconnected):
        await smtp.noop()
    # and nobody listens any more
    with pytest.raises(OSError):
        await asyncio.open_connection(sink.host, sink.port)
    assert len(sink.messages) == 1


async def test_a_message_its_handler_cannot_store_is_refused_with_451_and_not_kept() -> None:
    def full_disk(message: ReceivedMessage) -> None:
        raise OSError(28, "No space left on device")

    async with SmtpSink(on_message=full_disk) as sink:
        async with client(sink) as smtp:
            with pytest.raises(aiosmtplib.SMTPDataError) as refused:
                await smtp.sendmail("a@example.org", ["b@example.org"], MESSAGE)
        assert refused.value.code == 451 and "No space left on device" in refused.value.message
        assert sink.messages == []
