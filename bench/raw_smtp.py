"""The raw ceiling: pre-rendered messages sent with aiosmtplib, no database, no composition.

Usage: python bench/raw_smtp.py SMTP_PORT MESSAGES CONNECTIONS [GO_AT]

The messages (the same emails as the benchmark rows) are rendered before the
clock starts; the connections are opened before it starts too. Each connection
sends its share one after another (MAIL, RCPT, DATA), as the daemon's pool does.
Plain asyncio, like the daemon. With GO_AT (a wall-clock time), sending starts
then, so that several of these processes start together. Prints one RESULT
line with start and end, and the process's CPU time (user + system, ``time.process_time()``)
over the same span: with the emails sent, the raw sender's CPU per message.
"""

from __future__ import annotations

import asyncio
import sys
import time
from email.policy import SMTP as SMTP_POLICY

import aiosmtplib

import common


def template() -> bytes:
    """One message rendered by the standard library, with N standing for the row number."""
    return common.email_message(common.email_payload(987654321)).as_bytes(policy=SMTP_POLICY)


def render(tpl: bytes, n: int) -> tuple[str, list[str], bytes]:
    return "noreply@example.com", [f"customer{n}@example.com"], tpl.replace(b"987654321", str(n).encode())


async def main(port: int, messages: int, connections: int, go_at: float | None) -> None:
    tpl = template()
    rendered = [render(tpl, n) for n in range(messages)]
    clients = []
    for _ in range(connections):
        smtp = aiosmtplib.SMTP(hostname="127.0.0.1", port=port, start_tls=False, use_tls=False,
                               local_hostname="bench.example.com")
        await smtp.connect()
        clients.append(smtp)
    queue = iter(rendered)

    async def pump(smtp: aiosmtplib.SMTP) -> int:
        sent = 0
        for sender, recipients, data in queue:
            await smtp.sendmail(sender, recipients, data)
            sent += 1
        return sent

    if go_at is not None:
        await asyncio.sleep(max(0.0, go_at - time.time()))
    start, cpu_start = time.time(), time.process_time()
    counts = await asyncio.gather(*(pump(c) for c in clients))
    end, cpu_seconds = time.time(), time.process_time() - cpu_start
    for smtp in clients:
        try:
            await smtp.quit()
        except aiosmtplib.SMTPException:
            smtp.close()
    common.emit_result({"start": start, "end": end, "sent": sum(counts), "cpu_seconds": cpu_seconds,
                        "peak_rss_mb": common.peak_rss_mb()})


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
                     float(sys.argv[4]) if len(sys.argv) > 4 else None))
