"""The soak's SMTP sink, on 127.0.0.1 in the soak's own event loop.

No PIPELINING; each message answered 0-20 ms after its end; every copy counted by the row's
``X-Soak-Key`` header (``KEY_HEADER``, which the soak's producer sets). The SMTP faults act through
it: a drop probability (a transaction cut at MAIL, RCPT, DATA or after the whole message, left
unanswered) and ``outage``/``restore``.
"""

from __future__ import annotations

import asyncio
import random
import re
import socket
from collections import Counter

KEY_HEADER = "X-Soak-Key"


class Sink:
    """A small SMTP server on 127.0.0.1 that counts the copies of each key and injects faults."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.port = 0
        self.server: asyncio.base_events.Server | None = None
        self.conns: set[SinkConnection] = set()
        self.copies: Counter[str] = Counter()  # complete messages read, per key
        self.unanswered: Counter[str] = Counter()  # ... of which never answered (dropped or cut)
        self.drops: Counter[str] = Counter()  # connections cut by a drop fault, per command
        self.drop_probability = 0.0
        self.reject = False  # greet with 421 and close
        self.connections = 0

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if not self.port:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                self.port = s.getsockname()[1]
        self.server = await loop.create_server(lambda: SinkConnection(self), "127.0.0.1", self.port,
                                               reuse_address=True)

    async def outage(self, variant: str) -> None:
        if variant == "refused" and self.server is not None:
            self.server.close()
            self.server = None
        else:
            self.reject = True
        for conn in list(self.conns):
            conn.close()

    async def restore(self) -> None:
        self.reject = False
        if self.server is None:
            await self.start()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
        for conn in list(self.conns):
            conn.close()


class SinkConnection(asyncio.Protocol):
    EHLO = b"250-soak-sink\r\n250-8BITMIME\r\n250-SIZE 52428800\r\n250 ENHANCEDSTATUSCODES\r\n"

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.buf = bytearray()
        self.in_data = False
        self.drop_at: str | None = None
        self.pending: tuple[asyncio.TimerHandle, str] | None = None
        self.closed = False
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.sink.conns.add(self)
        self.sink.connections += 1
        if self.sink.reject:
            self.transport.write(b"421 4.3.2 soak-sink unavailable\r\n")
            self.close()
        else:
            self.transport.write(b"220 soak-sink ESMTP\r\n")

    def connection_lost(self, exc: Exception | None) -> None:
        self.close()
        self.sink.conns.discard(self)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while not self.closed and self.pending is None:
            if self.in_data:
                end = self.buf.find(b"\r\n.\r\n")
                if end < 0:
                    return
                body = bytes(self.buf[:end + 2])
                del self.buf[:end + 5]
                self.in_data = False
                self.message(body)
                continue
            nl = self.buf.find(b"\r\n")
            if nl < 0:
                return
            line = bytes(self.buf[:nl])
            del self.buf[:nl + 2]
            self.command(line.split(b" ", 1)[0].upper())

    def write(self, reply: bytes) -> None:
        if not self.closed and self.transport is not None:
            self.transport.write(reply)

    def command(self, verb: bytes) -> None:
        if verb == b"MAIL" and self.sink.drop_probability and self.sink.rng.random() < self.sink.drop_probability:
            self.drop_at = self.sink.rng.choices(["MAIL", "RCPT", "DATA", "BODY"], [1, 1, 1, 2])[0]
        if verb.decode(errors="replace") == self.drop_at:
            return self.drop()
        replies = {b"EHLO": self.EHLO, b"HELO": b"250 soak-sink\r\n", b"MAIL": b"250 2.1.0 Ok\r\n",
                   b"RCPT": b"250 2.1.5 Ok\r\n", b"DATA": b"354 End data with <CR><LF>.<CR><LF>\r\n",
                   b"RSET": b"250 2.0.0 Ok\r\n", b"NOOP": b"250 2.0.0 Ok\r\n", b"QUIT": b"221 2.0.0 Bye\r\n"}
        self.write(replies.get(verb, b"502 5.5.2 Error: command not recognized\r\n"))
        if verb == b"DATA":
            self.in_data = True
        elif verb == b"RSET":
            self.drop_at = None
        elif verb == b"QUIT":
            self.close()

    def message(self, body: bytes) -> None:
        found = re.search(rb"(?im)^" + KEY_HEADER.encode() + rb":[ \t]*([^\r\n]+)", body.split(b"\r\n\r\n", 1)[0])
        key = found.group(1).decode().strip() if found else "?"
        self.sink.copies[key] += 1
        if self.drop_at == "BODY":
            self.sink.unanswered[key] += 1
            return self.drop()
        timer = asyncio.get_running_loop().call_later(self.sink.rng.uniform(0, 0.02), self.answer)
        self.pending = (timer, key)

    def answer(self) -> None:
        self.pending = None
        self.drop_at = None
        self.write(b"250 2.0.0 Ok: queued as SOAK%d\r\n" % self.sink.rng.randrange(1 << 30))
        self.data_received(b"")

    def drop(self) -> None:
        self.sink.drops[self.drop_at or "?"] += 1
        self.close()

    def close(self) -> None:
        if self.pending is not None:  # a message read but not answered yet: its outcome is unknown
            self.pending[0].cancel()
            self.sink.unanswered[self.pending[1]] += 1
            self.pending = None
        self.closed = True
        if self.transport is not None:
            self.transport.close()
