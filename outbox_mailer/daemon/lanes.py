"""One lane per transport: a queue of claimed rows and long-lived workers that take them in order.

A lane has ``transport.max_parallel`` workers (never more sends in flight than
the transport can take, so no send waits inside the transport after it was
admitted), started once for the daemon's life: a claimed row costs a queue
entry, not a task, cancel scope or limiter. A worker whose row completes
without waiting goes straight on to the next, yielding every
``YIELD_EVERY_ROWS`` rows so the claim loop and the recorder get their turn.
What a worker does with a row is the executor's business (executor.py).

A lane of a transport that sends batches (``batch_limit`` > 1: a provider's
batch endpoint) hands each worker up to ``batch_limit`` queued rows at once,
and has room for a full batch per worker: each worker's batch is one request
of the daemon's ``concurrency`` (inflight.py), so the claim loop fills it. Its
rows that go singly (attachments, a pinned transport, ...) are found only once
a worker composes its batch; they are sent side by side (executor.py). So that
requests in flight stay bounded all the same, every request of such a lane, a
batch call or a single send, holds a slot of its one request budget
(:attr:`Lane.requests`, ``max_parallel`` slots) while it is admitted and made.

A transport with a shared rate can start only so many requests before a claim
grows too old to start its send: :meth:`Lane.room_within` is the room those
requests leave (the claim loop asks it, claimer.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable

import anyio

from ..delivery import Delivery

QUEUE_PER_WORKER = 3  # rows waiting per worker, if concurrency allows: claims of a worthwhile size
YIELD_EVERY_ROWS = 8


class Lane:
    def __init__(self, name: str, workers: int, batch_limit: int = 0) -> None:
        self.name = name
        self.workers = max(1, workers)
        self.batch_limit = batch_limit if batch_limit > 1 else 1
        self._queue: deque[Delivery] = deque()
        self._idle: list[anyio.Event] = []  # one event per worker waiting for a row
        self._busy = 0  # rows being handled
        self._working = 0  # workers handling a row or a batch: a request each, made or to come
        self.requests = anyio.CapacityLimiter(self.workers)  # a batching lane's requests in flight (one each)

    @property
    def room(self) -> int:
        """Rows this lane can take: one for each idle worker, and a few more waiting per worker.

        Waiting rows let the claim loop fetch a worthwhile batch while every
        worker is busy (a claim of one or two rows costs as much as one of
        twenty), yet a claim ages by at most a few sends before its row starts
        (the executor refuses to start it if that ever comes near the rescue
        delay). The daemon's ``concurrency``, in requests (inflight.py), bounds the total.

        A batching lane takes a batch for each free slot of its request budget, less the rows queued:
        rows claimed beyond the requests that can start would only wait (and a row whose daemon dies
        before its request is recorded has an unknown outcome).
        """
        room = self.capacity - self._busy - len(self._queue)
        if self.batch_limit == 1:
            return room
        return max(0, min(room, int(self.requests.available_tokens) * self.batch_limit - len(self._queue)))

    def room_within(self, requests: int, rows_per_request: int | None = None) -> int:
        """Rows this lane can take that ``requests`` requests would carry, besides the rows it holds (a
        request for each busy worker, and one for every ``rows_per_request`` rows queued: its
        ``batch_limit`` unless told)."""
        per_request = rows_per_request or self.batch_limit
        return max(0, min(self.room, (requests - self._working) * per_request - len(self._queue)))

    @property
    def capacity(self) -> int:
        """Rows this lane holds at most (handled and waiting)."""
        return max(QUEUE_PER_WORKER + 1, self.batch_limit) * self.workers

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

    async def serve(self, handle: Callable[[Delivery], Awaitable[None]],
                    handle_batch: Callable[[list[Delivery]], Awaitable[None]] | None = None) -> None:
        """One worker: handle queued rows one after another (up to ``batch_limit`` at a time through
        ``handle_batch``, when given), forever (cancel to stop)."""
        while True:
            handled = 0
            while self._queue:
                if handle_batch is not None and self.batch_limit > 1:  # even one row: its request takes a slot
                    rows = [self._queue.popleft() for _ in range(min(self.batch_limit, len(self._queue)))]
                    self._busy += len(rows)
                    self._working += 1
                    try:
                        await handle_batch(rows)
                    finally:
                        self._busy -= len(rows)
                        self._working -= 1
                else:
                    self._busy += 1
                    self._working += 1
                    try:
                        await handle(self._queue.popleft())
                    finally:
                        self._busy -= 1
                        self._working -= 1
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
