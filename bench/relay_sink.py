"""A loopback SMTP relay that takes DELAY_MS per message, for the realistic measurements.

Usage: python bench/relay_sink.py PORT DELAY_MS STATS_FILE MAX_SECONDS

Accepts every message (ESMTP with PIPELINING, SIZE, 8BITMIME, ENHANCEDSTATUSCODES) and answers
the end of DATA DELAY_MS after the body's last line arrived, the way a relay that queues to disk
and scans the message does; every other reply goes out at once, in order behind a pending one (a
connection is served one command at a time, like a real relay). Thousands of messages per second
on one core with no delay: the delay, not the sink, bounds a measurement (8 connections at 20 ms:
400 messages/s). Writes ``{"messages": N, "bytes": B}`` to STATS_FILE when it stops: after
MAX_SECONDS, or on SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections import deque

END_OF_DATA = b"\r\n.\r\n"
EHLO_REPLY = (b"250-relay-sink\r\n250-PIPELINING\r\n250-SIZE 52428800\r\n250-8BITMIME\r\n"
              b"250 ENHANCEDSTATUSCODES\r\n")


class Stats:
    messages = 0
    bytes = 0


class RelayProtocol(asyncio.Protocol):
    def __init__(self, delay: float, stats: Stats) -> None:
        self.delay, self.stats = delay, stats
        self.loop = asyncio.get_running_loop()
        self.buffer = bytearray()
        self.in_data = False
        self.scanned = 0  # how far the body was searched for its end already
        self.pending: deque[tuple[float, bytes, bool]] = deque()  # (when, reply, close after)
        self.busy_until = 0.0  # loop time at which the last queued reply goes out
        self.timer: asyncio.TimerHandle | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.write(b"220 relay-sink ESMTP\r\n")  # type: ignore[attr-defined]

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.pending.clear()

    def reply(self, data: bytes, delay: float = 0.0, close: bool = False) -> None:
        now = self.loop.time()
        if not self.pending and not delay:
            self.transport.write(data)
            if close:
                self.transport.close()
            return
        when = max(now, self.busy_until) + delay
        self.busy_until = when
        self.pending.append((when, data, close))
        if self.timer is None:
            self.timer = self.loop.call_at(self.pending[0][0], self.flush)

    def flush(self) -> None:
        self.timer = None
        now = self.loop.time()
        out = []
        close = False
        while self.pending and self.pending[0][0] <= now + 0.0005:
            _, data, close = self.pending.popleft()
            out.append(data)
            if close:
                break
        if out and not self.transport.is_closing():
            self.transport.write(b"".join(out))
        if close:
            self.pending.clear()
            self.transport.close()
        elif self.pending:
            self.timer = self.loop.call_at(self.pending[0][0], self.flush)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while self.buffer:
            if self.in_data:
                end = self.buffer.find(END_OF_DATA, max(0, self.scanned - 4))
                if end < 0:
                    self.scanned = len(self.buffer)
                    return
                self.stats.messages += 1
                self.stats.bytes += end  # the body with its last CRLF (a CRLF was put before it)
                del self.buffer[:end + 5]
                self.in_data, self.scanned = False, 0
                self.reply(b"250 2.0.0 Ok: queued as RELAY%d\r\n" % self.stats.messages, self.delay)
                continue
            line_end = self.buffer.find(b"\r\n")
            if line_end < 0:
                return
            verb = bytes(self.buffer[:4]).upper()
            del self.buffer[:line_end + 2]
            if verb == b"MAIL":
                self.reply(b"250 2.1.0 Ok\r\n")
            elif verb == b"RCPT":
                self.reply(b"250 2.1.5 Ok\r\n")
            elif verb == b"DATA":
                self.in_data, self.scanned = True, 0
                # the body's first line may sit right behind: "\r\n.\r\n" of an empty body is found too
                self.buffer[:0] = b"\r\n"
                self.reply(b"354 End data with <CR><LF>.<CR><LF>\r\n")
            elif verb == b"EHLO":
                self.reply(EHLO_REPLY)
            elif verb == b"HELO":
                self.reply(b"250 relay-sink\r\n")
            elif verb == b"QUIT":
                self.reply(b"221 2.0.0 Bye\r\n", close=True)
                return
            else:  # RSET, NOOP, anything else
                self.reply(b"250 2.0.0 Ok\r\n")


async def main(port: int, delay_ms: float, stats_path: str, max_seconds: float) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    stats = Stats()
    server = await loop.create_server(lambda: RelayProtocol(delay_ms / 1000, stats), "127.0.0.1", port,
                                      backlog=1024)
    try:
        await asyncio.wait_for(stop.wait(), max_seconds)
    except TimeoutError:
        pass
    server.close()
    with open(stats_path, "w") as out:
        json.dump({"messages": stats.messages, "bytes": stats.bytes}, out)


if __name__ == "__main__":
    try:
        import uvloop
    except ImportError:
        uvloop = None
    args = (int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], float(sys.argv[4]))
    if uvloop is not None:
        uvloop.run(main(*args))
    else:
        asyncio.run(main(*args))
