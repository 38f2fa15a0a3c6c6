"""A tiny in-process SMTP sink for ``outbox-mailer demo`` and the tests.

It listens on 127.0.0.1 by default (asyncio streams, no dependency beyond the
standard library) and speaks just enough ESMTP for aiosmtplib: EHLO/HELO, MAIL, RCPT,
DATA (with dot-unstuffing), RSET, NOOP and QUIT.  Accepted messages are kept
in :attr:`SmtpSink.messages` and, when *on_message* is given, handed to it as
they arrive (``outbox-mailer sink``: :mod:`outbox_mailer.devtools.sink_command`;
an OSError of the handler is answered 451).  Replies can be scripted with
*rules*: a callable ``rules(command, argument)`` consulted for ``"MAIL"`` (the sender),
``"RCPT"`` (the recipient) and ``"DATA"`` (the recipients joined by ``","``,
at the end of the data); a ``(code, text)`` result is sent instead of the
usual acceptance (after a 421 the sink hangs up, as real servers do).
Input is bounded: a line over 4096 bytes gets 500, a
message over *max_message_size* bytes gets 552.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["MessageHandler", "ReceivedMessage", "Rules", "SmtpSink", "always_refuse", "combine", "fail_first"]

Rules = Callable[[str, str], tuple[int, str] | None]
MAX_LINE = 4096
DEFAULT_MAX_MESSAGE_SIZE = 10 * 1024 * 1024


@dataclass
class ReceivedMessage:
    sender: str
    recipients: list[str]
    data: bytes


MessageHandler = Callable[[ReceivedMessage], None]


def fail_first(times: int, match: str, code: int, text: str, *, command: str = "RCPT") -> Rules:
    """Refuse *command* for arguments containing *match* the first *times* times."""
    left = [times]

    def rule(cmd: str, arg: str) -> tuple[int, str] | None:
        if cmd == command and match in arg and left[0] > 0:
            left[0] -= 1
            return code, text
        return None

    return rule


def always_refuse(match: str, code: int, text: str, *, command: str = "RCPT") -> Rules:
    """Refuse *command* for every argument containing *match*."""
    return lambda cmd, arg: (code, text) if cmd == command and match in arg else None


def combine(*rules: Rules) -> Rules:
    """A rule answering with the first rule that does not return None."""

    def rule(cmd: str, arg: str) -> tuple[int, str] | None:
        for r in rules:
            if (reply := r(cmd, arg)) is not None:
                return reply
        return None

    return rule


class _LineTooLong(Exception):
    pass


def _parse_path(arg: str, keyword: str) -> tuple[str, list[str]] | None:
    """``FROM:<a@b> SIZE=10`` -> ("a@b", ["SIZE=10"]); None if malformed."""
    if arg[:len(keyword)].upper() != keyword:
        return None
    rest = arg[len(keyword):].strip()
    if not rest.startswith("<") or ">" not in rest:
        return None
    end = rest.index(">")
    return rest[1:end], rest[end + 1:].split()


class SmtpSink:
    def __init__(self, *, rules: Rules | None = None,
                 max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE, host: str = "127.0.0.1", port: int = 0,
                 on_message: MessageHandler | None = None, keep_messages: bool = True) -> None:
        self.rules = rules
        self.max_message_size = max_message_size
        self.host = host
        self.port = port  # 0: a free port, read back after start()
        self.messages: list[ReceivedMessage] = []  # every accepted message, unless keep_messages is false
        self._on_message = on_message
        self._keep_messages = keep_messages
        self._server: asyncio.Server | None = None
        self._sessions: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self._closing = False

    async def start(self) -> None:
        self._closing = False
        self._server = await asyncio.start_server(self._handle, self.host, self.port, limit=MAX_LINE + 2,
                                                  reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening, drop every open connection and wait for their handlers."""
        self._closing = True
        if self._server is not None:
            self._server.close()
        for writer in self._sessions.values():
            writer.transport.abort()
        await asyncio.gather(*self._sessions, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> SmtpSink:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _rule(self, command: str, argument: str) -> tuple[int, str] | None:
        return self.rules(command, argument) if self.rules else None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._sessions[task] = writer
        try:
            if not self._closing:
                await self._session(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            del self._sessions[task]
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    @staticmethod
    async def _readline(reader: asyncio.StreamReader) -> bytes:
        """One line including its terminator; raises _LineTooLong after skipping it."""
        too_long = False
        while True:
            try:
                line = await reader.readuntil(b"\n")
            except asyncio.LimitOverrunError as e:
                await reader.readexactly(max(e.consumed, 1))
                too_long = True
                continue
            if too_long or len(line.rstrip(b"\r\n")) > MAX_LINE:
                raise _LineTooLong
            return line

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        greeted, sender = False, None
        recipients: list[str] = []
        code, text = 220, "outbox-mailer sink ESMTP ready"
        while True:
            lines = text.split("\n")
            for i, line in enumerate(lines):
                sep = " " if i == len(lines) - 1 else "-"
                writer.write(f"{code}{sep}{line}\r\n".encode("utf-8", "surrogateescape"))
            await writer.drain()
            if code in (221, 421):  # 421: "closing transmission channel", as servers do
                return
            try:
                raw = await self._readline(reader)
            except _LineTooLong:
                code, text = 500, "5.5.2 Line too long"
                continue
            verb, _, arg = raw.rstrip(b"\r\n").decode("utf-8", "surrogateescape").partition(" ")
            verb, arg = verb.upper(), arg.strip()
            mail, rcpt = _parse_path(arg, "FROM:"), _parse_path(arg, "TO:")
            code, text = 250, "2.0.0 OK"
            if verb == "HELO":
                greeted, sender, recipients, text = True, None, [], "outbox-mailer sink"
            elif verb == "EHLO":
                greeted, sender, recipients = True, None, []
                text = f"outbox-mailer sink\n8BITMIME\nSMTPUTF8\nSIZE {self.max_message_size}"
            elif verb == "RSET":
                sender, recipients = None, []
            elif verb == "QUIT":
                code, text = 221, "2.0.0 Bye"
            elif verb in ("MAIL", "RCPT", "DATA") and (
                    not greeted or (verb == "MAIL") == (sender is not None)
                    or (verb == "DATA" and not recipients)):
                code, text = 503, "5.5.1 Bad sequence of commands"
            elif verb == "MAIL" and mail is not None:
                if any(p.upper().startswith("SIZE=") and p[5:].isdigit()
                       and int(p[5:]) > self.max_message_size for p in mail[1]):
                    code, text = 552, "5.3.4 Message size exceeds fixed limit"
                elif (refusal := self._rule("MAIL", mail[0])) is not None:
                    code, text = refusal
                else:
                    sender = mail[0]
            elif verb == "RCPT" and rcpt is not None:
                if (refusal := self._rule("RCPT", rcpt[0])) is not None:
                    code, text = refusal
                else:
                    recipients.append(rcpt[0])
            elif verb in ("MAIL", "RCPT"):
                code, text = 501, "5.5.4 Syntax: MAIL FROM:<address> / RCPT TO:<address>"
            elif verb == "DATA":
                assert sender is not None
                writer.write(b"354 End data with <CR><LF>.<CR><LF>\r\n")
                await writer.drain()
                code, text = await self._read_data(reader, sender, recipients)
                sender, recipients = None, []
            elif verb != "NOOP":
                code, text = 502, "5.5.2 Command not recognized"

    async def _read_data(self, reader: asyncio.StreamReader, sender: str,
                         recipients: list[str]) -> tuple[int, str]:
        """Read up to the lone ".", undoing dot-stuffing; always stays in sync."""
        chunks: list[bytes] = []
        size, error = 0, None
        while True:
            try:
                line = await self._readline(reader)
            except _LineTooLong:
                error = error or (500, "5.5.2 Line too long")
                continue
            if line.rstrip(b"\r\n") == b".":
                break
            line = line[1:] if line.startswith(b".") else line
            size += len(line)
            if size > self.max_message_size:
                error = error or (552, "5.3.4 Message size exceeds fixed limit")
            if error is None:
                chunks.append(line)
        if error is not None:
            return error
        if (refusal := self._rule("DATA", ",".join(recipients))) is not None:
            return refusal
        message = ReceivedMessage(sender, list(recipients), b"".join(chunks))
        if self._on_message is not None:
            try:
                self._on_message(message)
            except OSError as exc:  # not stored (a full disk ...): the client is told to try again
                return 451, f"4.3.0 Message not stored: {exc.strerror or exc}"
        if self._keep_messages:
            self.messages.append(message)
        return 250, "2.0.0 OK: queued"
