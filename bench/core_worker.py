"""The real daemon (outbox_mailer.daemon.service.Daemon) draining pending rows through a no-op transport.

Usage: python bench/core_worker.py URL ROWS CONCURRENCY BATCH LOG_LEVEL

Everything the daemon does per row runs (claim with advisory locks, compose,
gate, decide, fenced batch record with attempt rows, unlock); only the network
send is replaced by ``Outcome.sent()``. Logging is configured like
``outbox-mailer run`` (stderr, the given level). Prints one RESULT line:
start/end wall-clock times, rows sent, peak RSS.
"""

from __future__ import annotations

import os
import sys
import time

import anyio

import common
from outbox_mailer.daemon.service import Daemon
from outbox_mailer.delivery import ComposedMessage, Delivery, Outcome
from outbox_mailer.serving.logs import configure_logging
from outbox_mailer.settings.config import load_settings


class NoopTransport:
    name = "smtp"
    send_timeout_seconds = 10.0
    idempotency_window_seconds = None

    def __init__(self, max_parallel: int) -> None:
        self.max_parallel = max_parallel

    async def send(self, message: ComposedMessage, delivery: Delivery) -> Outcome:
        return Outcome.sent()

    async def check(self) -> str:
        return "no-op"

    async def aclose(self) -> None:
        pass


class Counter:
    """DaemonObserver: stops the daemon once every expected row is recorded."""

    def __init__(self, rows: int, done: anyio.Event) -> None:
        self.rows, self.recorded_rows, self.done = rows, 0, done
        self.end: float | None = None
        self.rss_samples: list[float] = []

    def claimed(self, batch_size: int) -> None:
        pass

    def recorded(self, write: object, applied: bool) -> None:
        self.recorded_rows += 1
        if self.recorded_rows >= self.rows and self.end is None:
            self.end = time.time()
            self.done.set()


async def main(url: str, rows: int, concurrency: int, batch: int) -> None:
    settings = load_settings(
        database_url=url, default_from=common.DEFAULT_FROM, concurrency=concurrency, batch_size=batch,
        poll_interval_seconds=1.0, rescue_interval_seconds=3600.0, worker_name="bench-core",
    )
    done = anyio.Event()
    counter = Counter(rows, done)
    daemon = Daemon(settings, {"smtp": NoopTransport(concurrency)}, observer=counter)
    rss_samples: list[float] = []

    async def stop_when_done() -> None:
        await done.wait()
        daemon.stop()

    async def sample_rss() -> None:
        while not done.is_set():
            rss_samples.append(common.rss_mb(os.getpid())[0])
            await anyio.sleep(0.25)

    start = time.time()
    cpu_start = time.process_time()
    async with anyio.create_task_group() as tg:
        tg.start_soon(stop_when_done)
        tg.start_soon(sample_rss)
        await daemon.run()
    common.emit_result({
        "start": start, "end": counter.end, "recorded": counter.recorded_rows,
        "cpu_seconds": time.process_time() - cpu_start,
        "sent": daemon.recorder.counts.get("sent"), "peak_rss_mb": common.peak_rss_mb(),
        "max_sampled_rss_mb": max(rss_samples) if rss_samples else None,
    })


if __name__ == "__main__":
    url, rows, concurrency, batch, level = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    configure_logging(level, "text")
    anyio.run(main, url, rows, concurrency, batch)
