"""What the daemon holds: claimed rows, the send budget, and when to look for work again.

One object owns it. A claimed row is *held* from its claim until its outcome
is committed (its advisory lock is ours all that time); it is *sending* from
its claim until its send returns. ``concurrency`` bounds the rows sending; the
rows held are bounded at twice that (outcomes waiting for the recorder).

A held row's send may start only within its *start window*: the send must end
(``START_MARGIN_SECONDS`` early) before the claim could be rescued, so a claim
older than the rescue delay minus the send timeout and the margin is never
sent (:meth:`InFlight.start_left`).

Two signals, both set from anywhere without waiting:

* a slot freed (a send returned, an outcome was recorded, stopping);
* work may be due (a NOTIFY, a retry recorded, stopping), which ends the claim
  loop's idle wait.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import anyio

from ..clock import monotonic
from ..delivery import Delivery, Status
from ..store import OutcomeWrite

START_MARGIN_SECONDS = 1.0  # a send must end this long before its claim could be rescued


class InFlight:
    def __init__(self, concurrency: int, rescue_after_seconds: float) -> None:
        self.concurrency = concurrency
        self.rescue_after = rescue_after_seconds
        self._held: dict[int, tuple[str, float]] = {}  # row id -> (dedupe key, monotonic claim time)
        self._sending = 0
        self._slot_freed = anyio.Event()
        self._work_due = anyio.Event()

    def __len__(self) -> int:
        return len(self._held)

    @property
    def room(self) -> int:
        """Rows the claim loop may claim now."""
        return min(self.concurrency - self._sending, 2 * self.concurrency - len(self._held))

    @property
    def sending(self) -> int:
        """Rows claimed whose send has not returned yet."""
        return self._sending

    def ids(self) -> list[int]:
        return list(self._held)

    def keys(self) -> list[str]:
        """Dedupe keys whose advisory locks are ours (re-taken after a reconnect)."""
        return [key for key, _ in self._held.values()]

    def start_window(self, send_timeout_seconds: float) -> float:
        """How long after its claim a send with this timeout may start."""
        return self.rescue_after - send_timeout_seconds - START_MARGIN_SECONDS

    def start_left(self, delivery: Delivery, send_timeout_seconds: float) -> float:
        """Seconds left to start the row's send (-inf once the row is no longer held)."""
        held = self._held.get(delivery.id)
        return -math.inf if held is None else self.start_window(send_timeout_seconds) - (monotonic() - held[1])

    # -- the row's path ---------------------------------------------------------

    def hold(self, batch: Sequence[Delivery], claimed_at: float) -> None:
        for delivery in batch:
            self._held[delivery.id] = (delivery.dedupe_key, claimed_at)
        self._sending += len(batch)

    def send_returned(self) -> None:
        """A send returned (or never could start): its slot is free; the row stays held."""
        self._sending -= 1
        self._slot_freed.set()

    def abandon(self, delivery: Delivery) -> None:
        """A send cut off at shutdown: the row stays 'sending' for a rescuer, and is no longer ours."""
        self.send_returned()
        self._held.pop(delivery.id, None)

    def recorded(self, batch: Sequence[OutcomeWrite]) -> None:
        """Outcomes committed: the rows are no longer held; a retry may be due soon."""
        for write in batch:
            self._held.pop(write.delivery.id, None)
        self._slot_freed.set()
        if any(w.transition.status is Status.PENDING for w in batch):
            self._work_due.set()  # a retry may be due before the claim loop's current wait ends

    # -- signals ----------------------------------------------------------------

    def work_may_be_due(self) -> None:
        self._work_due.set()

    def stop(self) -> None:
        self._work_due.set()
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
