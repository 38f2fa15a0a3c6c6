"""Reading SMTP replies for pipelined commands (RFC 2920) on a connection aiosmtplib set up.

aiosmtplib reads exactly one reply per command it writes: it parses one reply
per network read and drops what arrives while no command of its own waits, so
several replies in one segment (as Postfix sends them to a pipelining client)
would be lost. Once aiosmtplib has connected, greeted and done EHLO, STARTTLS
and AUTH, a :class:`Wire` takes over the connection's transport
(``transport.set_protocol``) and queues every reply in order, whatever its
framing. It hands the end of the connection on to aiosmtplib's protocol, so
that ``SMTP.is_connected`` stays true to the connection.

Plain asyncio (aiosmtplib is asyncio-only too); nothing here imports aiosmtplib.
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from typing import NamedTuple

__all__ = ["Reply", "Wire", "WireError", "frame_body"]

_MAX_LINE = 8192
_MAX_LINES = 100  # in one reply: more is garbage
_LINE_ENDINGS = re.compile(rb"\r\n|\n|\r(?!\n)")


class Reply(NamedTuple):
    code: int
    text: str  # the lines of a multi-line reply joined by "\n"


class WireError(Exception):
    """The connection cannot carry on: lost, timed out or not speaking SMTP."""

    def __init__(self, message: str, *, lost: bool = False) -> None:
        super().__init__(message)
        self.lost = lost  # closed or reset (rather than a timeout or garbage)


def frame_body(data: bytes) -> bytes:
    """The message as sent after 354: CRLF line endings, dot-stuffed, ended by CRLF.CRLF."""
    crlf = data.count(b"\r\n")
    if data.count(b"\n") != crlf or data.count(b"\r") != crlf:  # a bare CR or LF
        data = _LINE_ENDINGS.sub(b"\r\n", data)
    if b"\n." in data:  # every line starts after an LF now
        data = data.replace(b"\n.", b"\n..")
    if data.startswith(b"."):
        data = b"." + data
    return data + (b".\r\n" if data.endswith(b"\r\n") else b"\r\n.\r\n")


class Wire(asyncio.Protocol):
    """The protocol of one SMTP connection while it sends mail: a queue of replies."""

    def __init__(self, transport: asyncio.WriteTransport, previous: asyncio.BaseProtocol) -> None:
        self._transport = transport
        self._previous = previous  # aiosmtplib's protocol, told when the connection ends
        self._partial = b""  # the start of a line still to come
        self._texts: list[bytes] = []  # the lines so far of a multi-line reply
        self._replies: deque[Reply] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self.failure: WireError | None = None
        transport.set_protocol(self)

    @property
    def idle(self) -> bool:
        """Usable for a new transaction: alive, and nothing unasked-for was received."""
        return self.failure is None and not self._replies and not self._partial and not self._texts

    @property
    def finished(self) -> bool:
        """The connection is gone and every reply it brought has been read."""
        return self.failure is not None and not self._replies

    def write(self, data: bytes) -> None:
        if self.failure is not None:
            raise self.failure
        if self._transport.is_closing():
            raise WireError("Connection lost", lost=True)
        self._transport.write(data)

    async def reply(self, timeout: float) -> Reply:
        """The next reply; waits at most ``timeout`` seconds for it."""
        if self._replies:
            return self._replies.popleft()
        if self.failure is not None:
            raise self.failure
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(timeout, self._time_out, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None
        if self._replies:
            return self._replies.popleft()
        assert self.failure is not None
        raise self.failure

    async def command(self, line: bytes, timeout: float) -> Reply:
        self.write(line)
        return await self.reply(timeout)

    # -- asyncio.Protocol -----------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self.failure is not None:
            return
        if self._partial:
            data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        texts = self._texts
        for line in lines:
            code = line[:3]
            if len(code) != 3 or not code.isdigit() or len(line) > _MAX_LINE:
                shown = line[:80].decode("utf-8", "replace").strip()
                self._fail(WireError(f"Malformed SMTP response line: {shown}"))
                return
            text = line[4:].strip(b" \t\r")
            if line[3:4] == b"-":  # more lines of this reply to come
                texts.append(text)
                continue
            if texts:
                texts.append(text)
                text = b"\n".join(texts)
                texts.clear()
            self._replies.append(Reply(int(code), text.decode("utf-8", "surrogateescape")))
        if len(self._partial) > _MAX_LINE or len(texts) > _MAX_LINES:
            self._fail(WireError("Response too long"))
            return
        if self._replies and self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def eof_received(self) -> bool:
        self._fail(WireError("Unexpected EOF received", lost=True))
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(WireError("Connection lost", lost=True))
        self._previous.connection_lost(exc)

    # -- internals --------------------------------------------------------------

    def _time_out(self, waiter: asyncio.Future[None]) -> None:
        if not waiter.done():
            self._fail(WireError("Timed out waiting for server response"))

    def _fail(self, error: WireError) -> None:
        if self.failure is None:
            self.failure = error
            self._partial = b""
            self._texts.clear()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
