"""A tiny SMTP sink that timestamps MAIL FROM, for the pickup-latency measurement.

Usage: python bench/latency_sink.py PORT OUTPUT_FILE MAX_SECONDS

Accepts every message (ESMTP: PIPELINING-free, SIZE, 8BITMIME), and appends
``<wall-clock time of MAIL FROM> <envelope sender>`` to OUTPUT_FILE for each
MAIL command. Stops by itself after MAX_SECONDS (or on SIGTERM).
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time


class SinkProtocol(asyncio.Protocol):
    def __init__(self, out) -> None:  # type: ignore[no-untyped-def]
        self.out = out
        self.buffer = b""
        self.in_data = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transport.write(b"220 latency-sink ESMTP\r\n")

    def data_received(self, data: bytes) -> None:
        now = time.time()
        self.buffer += data
        while True:
            if self.in_data:
                end = self.buffer.find(b"\r\n.\r\n")
                if end < 0:
                    return
                self.buffer = self.buffer[end + 5:]
                self.in_data = False
                self.transport.write(b"250 2.0.0 Ok: queued as LAT1234\r\n")
                continue
            line_end = self.buffer.find(b"\r\n")
            if line_end < 0:
                return
            line, self.buffer = self.buffer[:line_end], self.buffer[line_end + 2:]
            verb = line[:4].upper()
            if verb == b"MAIL":
                sender = line.split(b"<", 1)[-1].split(b">", 1)[0].decode("ascii", "replace")
                self.out.write(f"{now:.6f} {sender}\n")
                self.transport.write(b"250 2.1.0 Ok\r\n")
            elif verb == b"RCPT":
                self.transport.write(b"250 2.1.5 Ok\r\n")
            elif verb == b"DATA":
                self.in_data = True
                self.transport.write(b"354 End data with <CR><LF>.<CR><LF>\r\n")
                # a DATA with the body in the same packet is handled on the next loop turn
            elif verb in (b"EHLO",):
                self.transport.write(b"250-latency-sink\r\n250-SIZE 52428800\r\n250-8BITMIME\r\n250 ENHANCEDSTATUSCODES\r\n")
            elif verb == b"HELO":
                self.transport.write(b"250 latency-sink\r\n")
            elif verb == b"QUIT":
                self.transport.write(b"221 2.0.0 Bye\r\n")
                self.transport.close()
                return
            else:  # RSET, NOOP, anything else
                self.transport.write(b"250 2.0.0 Ok\r\n")


async def main(port: int, path: str, max_seconds: float) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    with open(path, "w", buffering=1) as out:
        server = await loop.create_server(lambda: SinkProtocol(out), "127.0.0.1", port)
        try:
            await asyncio.wait_for(stop.wait(), max_seconds)
        except TimeoutError:
            pass
        server.close()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2], float(sys.argv[3])))
