"""PgQueuer workers, drained on uvloop the way ``pgq run`` runs them.

Usage:
  python bench/pgq_worker.py noop  URL JOBS BATCH
  python bench/pgq_worker.py email URL JOBS BATCH SMTP_PORT CONNECTIONS

``noop``: an entrypoint that does nothing (PgQueuer's own throughput ceiling).
``email``: the worker a user would otherwise write: each job builds an
``email.message.EmailMessage`` from its JSON payload and sends it with
aiosmtplib over a small pool of reused connections (a generous version: the
naive one opens a connection per email).

The jobs are enqueued beforehand by bench/run.py. Prints one RESULT line with
the wall-clock start and end of the drain and the process's CPU (user + system) over it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from datetime import timedelta
from email.message import EmailMessage

import aiosmtplib
import asyncpg
import uvloop
from pgqueuer import Queries, QueueManager
from pgqueuer.models import Job
from pgqueuer.types import QueueExecutionMode

import common


class SmtpPool:
    def __init__(self, port: int, size: int) -> None:
        self.port, self.size = port, size
        self.idle: asyncio.Queue[aiosmtplib.SMTP] = asyncio.Queue()

    async def open(self) -> None:
        for _ in range(self.size):
            smtp = aiosmtplib.SMTP(hostname="127.0.0.1", port=self.port, start_tls=False, use_tls=False,
                                   local_hostname="bench.example.com")
            await smtp.connect()
            await self.idle.put(smtp)

    async def send(self, message: EmailMessage) -> None:
        smtp = await self.idle.get()
        try:
            await smtp.send_message(message)
        finally:
            self.idle.put_nowait(smtp)

    async def close(self) -> None:
        while not self.idle.empty():
            smtp = self.idle.get_nowait()
            try:
                await smtp.quit()
            except aiosmtplib.SMTPException:
                smtp.close()


async def main(argv: list[str]) -> None:
    mode, url, jobs, batch = argv[0], argv[1], int(argv[2]), int(argv[3])
    conn = await asyncpg.connect(url)
    qm = QueueManager(Queries.from_asyncpg_connection(conn))
    done = {"n": 0}
    pool: SmtpPool | None = None

    if mode == "noop":
        @qm.entrypoint("noop")
        async def noop(job: Job) -> None:
            done["n"] += 1
    else:
        pool = SmtpPool(int(argv[4]), int(argv[5]))
        await pool.open()

        @qm.entrypoint("email")
        async def send_email(job: Job) -> None:
            await pool.send(common.email_message(json.loads(job.payload or b"{}")))
            done["n"] += 1

    start = time.time()
    cpu_start = time.process_time()  # this process's user + system CPU, as core_worker.py measures the daemon's
    await qm.run(batch_size=batch, mode=QueueExecutionMode.drain, dequeue_timeout=timedelta(seconds=1))
    end = time.time()
    cpu_seconds = time.process_time() - cpu_start
    if pool is not None:
        await pool.close()
    await conn.close()
    common.emit_result({"start": start, "end": end, "done": done["n"], "expected": jobs, "cpu_seconds": cpu_seconds,
                        "peak_rss_mb": common.peak_rss_mb()})


if __name__ == "__main__":
    uvloop.run(main(sys.argv[1:]))
