"""What the daemon holds: claimed rows, the send budget, and when to look for work again.

One object owns it. A claimed row is *held* from its claim until its outcome
is committed (its advisory lock is ours all that time); it is *sending* from
its claim until its send returns. ``concurrency`` counts *requests*: a row is
one request on a lane that sends singly, and a batching lane's request carries
up to its ``batch_limit`` rows (its rows count ``ceil(rows / batch_limit)``
requests). The rows sending are bounded at ``concurrency`` requests' worth, the
rows held at twice that (outcomes waiting for the recorder); :meth:`InFlight.room_on`
is what a lane may still be claimed under both bounds. With only lanes that
send singly this is ``concurrency`` rows sending and twice that held. A
batching lane's row found to go singly (attachments, a pinned transport, ...:
found when its batch is composed, :meth:`InFlight.go_singly`) is a request of
its own from then on, so such rows leave room for fewer claims. A row is
*waiting* from its claim until its request starts (a batch's once it is
recorded, executor.py: :meth:`InFlight.started`) or its send returns without
one: a waiting row was never sent, so a shutdown that cuts its wait short gives
it back untried (:meth:`InFlight.waiting`). A daemon killed meanwhile leaves a
batching lane's waiting rows with an unknown outcome, so the claim loop keeps
at most about a batch of them per lane (:meth:`InFlight.waiting_on`).

The content of the rows held is bounded too: at most ``2 x concurrency``
rows' worth of ``max_content_bytes``, what the rows held under lanes that send
singly could load. A claim loads only what is left of it (:attr:`InFlight.content_room`,
the claim's byte budget, store/queries.sql claim_due) plus at most one row, so
the content held never exceeds ``(2 x concurrency + 1) x max_content_bytes``,
however many rows a batching lane's requests carry.

A held row's send may start only within its *start window*: the send must end
(``START_MARGIN_SECONDS`` early) before the claim could be rescued, so a claim
older than the rescue delay minus the send timeout and the margin is never
sent (:meth:`InFlight.start_left`).

Two signals, both set from anywhere without waiting:

* a slot freed (a send returned or a batching lane's request started, an
  outcome was recorded, stopping);
* work may be due (a NOTIFY, a retry recorded, stopping), which ends the claim
  loop's idle wait.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence

import anyio

from ..clock import monotonic
from ..delivery import Delivery, Status
from ..store import OutcomeWrite

START_MARGIN_SECONDS = 1.0  # a send must end this long before its claim could be rescued
NO_LANE = ""  # the rows a claim fails at once (no lane takes them), and rows held without a lane named
SINGLY = " singly"  # after a batching lane's name: its rows that go singly, a request each


class InFlight:
    def __init__(self, concurrency: int, rescue_after_seconds: float,
                 rows_per_request: Mapping[str, int] | None = None, max_content_bytes: int | None = None) -> None:
        self.concurrency = concurrency
        self.rescue_after = rescue_after_seconds
        # the content held at most (None: unbounded), and held now
        self.content_budget = None if max_content_bytes is None else 2 * concurrency * max_content_bytes
        self.content_held = 0
        # rows one request carries, by lane: a batching lane's batch_limit; 1 for any other lane
        self._per_request = {lane: rows for lane, rows in (rows_per_request or {}).items() if rows > 1}
        # row id -> (dedupe key, monotonic claim time, lane, content bytes)
        self._held: dict[int, tuple[str, float, str, int]] = {}
        self._sending = 0
        self._sending_on: Counter[str] = Counter()  # rows sending, by lane
        self._held_on: Counter[str] = Counter()  # rows held, by lane
        self._waiting: dict[int, str] = {}  # row id -> lane: claimed, its request not started yet
        self._waiting_on: Counter[str] = Counter()  # rows waiting, by batching lane
        self.notices = 0  # counts the signals that work may be due (a claim that found nothing may find some)
        self._slot_freed = anyio.Event()
        self._work_due = anyio.Event()

    def __len__(self) -> int:
        return len(self._held)

    @property
    def room(self) -> int:
        """Rows the claim loop may claim now for lanes that send singly (a row a request)."""
        return self.room_on(NO_LANE)

    def room_on(self, lane: str) -> int:
        """Rows lane ``lane`` may be claimed now: what the requests left, of ``concurrency`` sending and
        of twice that held, would carry on it, less the rows it has; none once the content budget is spent."""
        if self.content_room is not None and self.content_room <= 0:
            return 0
        per_request = self._per_request.get(lane, 1)
        sending = (self.concurrency - self._requests(self._sending_on, lane)) * per_request - self._sending_on[lane]
        held = (2 * self.concurrency - self._requests(self._held_on, lane)) * per_request - self._held_on[lane]
        return max(0, min(sending, held))

    @property
    def content_room(self) -> int | None:
        """Bytes of content a claim may still load (beyond its first row); None: no bound."""
        return None if self.content_budget is None else self.content_budget - self.content_held

    def held_on(self, lane: str) -> int:
        """Rows held that were routed to lane ``lane``."""
        return self._held_on[lane]

    def waiting_on(self, lane: str) -> int:
        """Rows of batching lane ``lane`` claimed whose request has not started."""
        return self._waiting_on[lane]

    def waiting(self, delivery: Delivery) -> bool:
        """Whether the row is held and its request has not started (nothing of it was sent), nor its send
        returned."""
        return delivery.id in self._waiting

    def singly_on(self, lane: str) -> int:
        """Rows of batching lane ``lane`` sending singly: a request each."""
        return self._sending_on[lane + SINGLY]

    def _requests(self, rows: Counter[str], besides: str) -> int:
        """The requests that ``rows`` (by lane) make on every lane but ``besides``."""
        return sum(-(-n // self._per_request.get(lane, 1)) for lane, n in rows.items() if lane != besides)

    @property
    def sending(self) -> int:
        """Rows claimed whose send has not returned yet."""
        return self._sending

    def ids(self) -> list[int]:
        return list(self._held)

    def keys(self) -> list[str]:
        """Dedupe keys whose advisory locks are ours (re-taken after a reconnect)."""
        return [held[0] for held in self._held.values()]

    def start_window(self, send_timeout_seconds: float) -> float:
        """How long after its claim a send with this timeout may start."""
        return self.rescue_after - send_timeout_seconds - START_MARGIN_SECONDS

    def start_left(self, delivery: Delivery, send_timeout_seconds: float) -> float:
        """Seconds left to start the row's send (-inf once the row is no longer held)."""
        held = self._held.get(delivery.id)
        return -math.inf if held is None else self.start_window(send_timeout_seconds) - (monotonic() - held[1])

    # -- the row's path ---------------------------------------------------------

    def hold(self, batch: Sequence[Delivery], claimed_at: float, lanes: Sequence[str] | None = None) -> None:
        """Hold claimed rows, each counted on the lane it goes to (``lanes``, in order; none: NO_LANE)."""
        for i, delivery in enumerate(batch):
            lane = lanes[i] if lanes is not None else NO_LANE
            self._held[delivery.id] = (delivery.dedupe_key, claimed_at, lane, delivery.content_bytes)
            self.content_held += delivery.content_bytes
            self._held_on[lane] += 1
            self._sending_on[lane] += 1
            self._waiting[delivery.id] = lane
            if lane in self._per_request:
                self._waiting_on[lane] += 1
        self._sending += len(batch)

    def started(self, batch: Sequence[Delivery]) -> None:
        """The rows' request starts (a batch's recorded first): they no longer wait, and their lane may
        be claimed for again."""
        for delivery in batch:
            lane = self._waiting.pop(delivery.id, None)
            if lane in self._per_request:
                self._waiting_on[lane] -= 1
                self._slot_freed.set()

    def go_singly(self, batch: Sequence[Delivery]) -> None:
        """Rows of a batching lane that go singly: each counts a request of its own from now on."""
        for delivery in batch:
            held = self._held.get(delivery.id)
            if held is None or held[2] not in self._per_request:
                continue
            lane, singly = held[2], held[2] + SINGLY
            self._held[delivery.id] = (held[0], held[1], singly, held[3])
            self._held_on[lane] -= 1
            self._held_on[singly] += 1
            self._sending_on[lane] -= 1
            self._sending_on[singly] += 1

    def send_returned(self, delivery: Delivery) -> None:
        """The row's send returned (or never could start): its slot is free; the row stays held."""
        held = self._held.get(delivery.id)
        lane = self._waiting.pop(delivery.id, None)  # not None: it never started (held back, failed before it)
        if lane in self._per_request:
            self._waiting_on[lane] -= 1
        self._sending -= 1
        self._sending_on[held[2] if held is not None else NO_LANE] -= 1
        self._slot_freed.set()

    def abandon(self, delivery: Delivery) -> None:
        """A send cut off at shutdown: the row stays 'sending' for a rescuer, and is no longer ours."""
        self.send_returned(delivery)
        self._release(delivery.id)

    def recorded(self, batch: Sequence[OutcomeWrite]) -> None:
        """Outcomes committed: the rows are no longer held; a retry may be due soon."""
        for write in batch:
            self._release(write.delivery.id)
        self._slot_freed.set()
        if any(w.transition.status is Status.PENDING for w in batch):
            self.work_may_be_due()  # a retry may be due before the claim loop's current wait ends

    def _release(self, row_id: int) -> None:
        held = self._held.pop(row_id, None)
        if held is not None:
            self._held_on[held[2]] -= 1
            self.content_held -= held[3]

    # -- signals ----------------------------------------------------------------

    def work_may_be_due(self) -> None:
        self.notices += 1
        self._work_due.set()

    def stop(self) -> None:
        self.work_may_be_due()
        self._slot_freed.set()

    def expect_work(self) -> None:
        """Before a claim: a NOTIFY arriving during the claim must end the wait that follows it."""
        self._work_due = anyio.Event()

    async def wait_for_work(self, seconds: float) -> None:
        with anyio.move_on_after(seconds):
            await self._work_due.wait()

    async def wait_for_slot(self, seconds: float) -> None:
        self._slot_freed = anyio.Event()
        with anyio.move_on_after(seconds):
            await self._slot_freed.wait()
