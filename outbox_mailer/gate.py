"""Admission to one transport, and what its outcomes teach the daemon.

A :class:`TransportGate` wraps one transport with:

* a queue of claimed rows and ``transport.max_parallel`` long-lived workers
  that take them in order (never more sends in flight than the transport can
  take, so no send waits inside the transport after it was admitted; and no
  task, cancel scope or limiter per row: a worker whose send finishes without
  waiting goes straight on to the next row);
* an optional token bucket (rate limit shared by the daemon's sends; a 429
  with Retry-After empties it for that long);
* a circuit breaker (an unreachable server pauses the transport with backoff;
  an outcome may also ask for an explicit pause: quota, refused credentials).

The ``may_start`` check given to :meth:`send` runs after admission, right
before the send, so a row that waited too long since its claim is not sent
(its claim could be rescued before the send ends).
"""

from __future__ import annotations

import dataclasses
import logging
from collections import deque
from collections.abc import Awaitable, Callable

import anyio

from .breaker import Breaker
from .delivery import Cause, ComposedMessage, Delivery, Outcome, Transport
from .ratelimit import TokenBucket

log = logging.getLogger("outbox_mailer")

QUEUE_PER_WORKER = 3  # rows waiting per worker, if concurrency allows: claims of a worthwhile size
YIELD_EVERY_ROWS = 8


class TransportGate:
    def __init__(self, name: str, transport: Transport, breaker: Breaker, limiter: TokenBucket | None) -> None:
        self.name = name
        self.transport = transport
        self.breaker = breaker
        self.limiter = limiter
        self.workers = max(1, transport.max_parallel)
        self._queue: deque[Delivery] = deque()
        self._idle: list[anyio.Event] = []  # one event per worker waiting for a row
        self._busy = 0  # workers handling a row

    def is_paused(self, now: float) -> bool:
        return self.breaker.is_paused(now)

    @property
    def room(self) -> int:
        """Rows this gate can take: one for each idle worker, and a few more waiting per worker.

        Waiting rows let the claim loop fetch a worthwhile batch while every
        worker is busy (a claim of one or two rows costs as much as one of
        twenty), yet a claim ages by at most a few sends before its row starts
        (``may_start`` refuses it if that ever comes near the rescue delay).
        The daemon's ``concurrency`` bounds the total.
        """
        return QUEUE_PER_WORKER * self.workers + self.workers - self._busy - len(self._queue)

    def submit(self, delivery: Delivery) -> None:
        """Queue a claimed row and wake one idle worker (never waits)."""
        self._queue.append(delivery)
        if self._idle:
            self._idle.pop().set()

    def take_queued(self) -> list[Delivery]:
        """Remove and return the rows no worker has started (at shutdown)."""
        rows = list(self._queue)
        self._queue.clear()
        return rows

    async def serve(self, handle: Callable[[Delivery], Awaitable[None]]) -> None:
        """One worker: handle queued rows one after another, forever (cancel to stop)."""
        while True:
            handled = 0
            while self._queue:
                self._busy += 1
                try:
                    await handle(self._queue.popleft())
                finally:
                    self._busy -= 1
                handled += 1
                if handled % YIELD_EVERY_ROWS == 0:
                    # a send that completes without waiting would otherwise hold the event loop for the
                    # whole queue, and neither the next claim nor the last outcomes' write could go to
                    # PostgreSQL meanwhile: the database would idle while this process computes
                    await anyio.lowlevel.checkpoint()
            wake = anyio.Event()
            self._idle.append(wake)
            try:
                await wake.wait()
            finally:
                if not wake.is_set():
                    self._idle.remove(wake)

    async def send(self, message: ComposedMessage, delivery: Delivery, may_start: Callable[[], bool]) -> Outcome:
        """Send through the transport unless paused, rate-limited past safety, or the claim is too old."""
        if self.limiter is not None:
            await self.limiter.acquire()
        now = anyio.current_time()
        if self.breaker.is_paused(now):
            return Outcome.held_back(f"transport {self.name!r} is paused",
                                     retry_after_seconds=self.breaker.remaining(now))
        if not may_start():
            return Outcome.held_back("waited too long after the claim to start a send safely")
        return await self.transport.send(message, delivery)

    def observe(self, outcome: Outcome) -> Outcome:
        """Feed the breaker and the rate limiter; returns the outcome with its retry time adjusted."""
        now = anyio.current_time()
        if outcome.cause is Cause.PAUSED and outcome.pause_seconds:
            was_paused = self.breaker.is_paused(now)
            self.breaker.pause(now, outcome.pause_seconds)
            if not was_paused:  # one line per pause, not one per send that was in flight
                log.error("transport %s paused for %.0fs: %s", self.name, outcome.pause_seconds, outcome.error)
            return dataclasses.replace(
                outcome, retry_after_seconds=max(outcome.pause_seconds, outcome.retry_after_seconds or 0))
        if self.limiter is not None and outcome.retry_after_seconds and outcome.reply_code == 429:
            self.limiter.hold_off(outcome.retry_after_seconds)  # "too many requests" slows every send of it
        if outcome.cause is Cause.UNREACHABLE:
            was_paused = self.breaker.is_paused(now)
            pause = self.breaker.unreachable(now)
            if not was_paused:
                log.warning("transport %s unreachable (%s): paused for %.1fs, attempts not charged",
                            self.name, outcome.error, pause)
            return dataclasses.replace(outcome, retry_after_seconds=max(pause, outcome.retry_after_seconds or 0))
        if outcome.charge_attempt and self.breaker.failures:
            log.info("transport %s reachable again after %d failed tries", self.name, self.breaker.failures)
            self.breaker.reached()
        return outcome
