"""The claim loop: claim due rows while there is room, route each, wait for work when there is none.

Each turn: beat the watchdog; if the send budget (:class:`InFlight`) or every
open transport's lane is full, wait for a slot; otherwise claim up to
``batch_size`` rows (skipping paused transports), hold them in flight, fail at
once the ones that cannot be sent, and queue the others on their transport's
lane. A lane's room under a shared rate is what the requests that rate starts
within a new claim's start window would carry (none while its next request
slot is further away: the loop waits for that moment). A claim that returns
fewer rows than asked means the queue is drained for now: wait for a NOTIFY,
the next ``scheduled_at``, the end of a transport pause, or the poll interval.
While waiting, the claim session is *idle*: no claim is coming to carry the
unlocks of committed outcomes (see ``ClaimSession``), so an idle daemon holds
no advisory locks.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Protocol

import anyio

from ..clock import monotonic
from ..errors import DatabaseError
from ..settings.config import Settings
from ..store import ClaimSession, OutcomeWrite
from .context import DaemonContext
from .executor import Executor
from .gate import TransportGate
from .inflight import InFlight
from .lanes import Lane
from .liveness import Liveness
from .sessions import DaemonSessions

log = logging.getLogger("outbox_mailer")

DUE_BUT_UNCLAIMABLE_RECHECK_SECONDS = 0.1


class DaemonObserver(Protocol):
    """What the daemon reports as it works (metrics)."""

    def claimed(self, batch_size: int) -> None: ...

    def recorded(self, write: OutcomeWrite, applied: bool) -> None: ...

    def batch_replayed_to_suppressed(self, transport: str, recipients: int) -> None: ...


class Claimer:
    def __init__(self, settings: Settings, db: DaemonSessions, inflight: InFlight, executor: Executor,
                 gates: Mapping[str, TransportGate], lanes: Mapping[str, Lane], liveness: Liveness,
                 stopping: anyio.Event, observer: DaemonObserver | None = None) -> None:
        self.settings = settings
        self._db = db
        self._inflight = inflight
        self._executor = executor
        self._gates = gates
        self._lanes = lanes
        self._liveness = liveness
        self._stopping = stopping
        self._observer = observer
        self.last_claim_ok = -math.inf  # monotonic time of the last successful claim (health)
        self._drained = True  # the last claim found the queue drained (note_claim()): claim at once

    @property
    def ctx(self) -> DaemonContext:
        """What the claim shares with the executor: the worker, the routes, the transports."""
        return self._executor.ctx

    def paused(self) -> list[str]:
        """Transports whose rows nothing can carry now: paused (by the breaker or an operator), and so is
        every open fallback they have (failover.py)."""
        return self.ctx.routes.paused(monotonic())

    def _pauses_left(self) -> list[float]:
        """Seconds until each paused transport, and each lane waiting for its rate's next request slot,
        may take rows again."""
        now = monotonic()
        paused = [g.paused_for(now) for g in self._gates.values() if g.is_paused(now)]
        slots = [self._gates[name].next_request_in() - self._window(name) for name in self._lanes]
        return paused + [s for s in slots if s > 0]

    def _window(self, name: str) -> float:
        return self._inflight.start_window(self.ctx.transports[name].send_timeout_seconds)

    def _lane_room(self) -> int:
        """Sends the open transports could start right now: claim no more, so claimed rows do not
        queue at a lane (a queued row's claim ages; see InFlight.start_left)."""
        if not self._lanes:
            return self.settings.concurrency  # nothing to queue on (every row fails as an unknown transport)
        now = monotonic()
        return sum(self._room(name, lane) for name, lane in self._lanes.items() if not self._gates[name].is_paused(now))

    def _room(self, name: str, lane: Lane) -> int:
        rate_room = self._rate_room(name, lane)
        return lane.room if rate_room is None else rate_room

    def _rate_room(self, name: str, lane: Lane) -> int | None:
        """Under a shared rate, the rows lane ``name`` may take: what the requests that rate starts before
        a new claim is too old to start its send would carry (rows claimed beyond that would wait for a
        slot until they could not be sent, and go back untried). None: no shared rate."""
        requests = self._gates[name].requests_within(self._window(name))
        return None if requests is None else lane.room_within(requests)

    def _unclaimable(self) -> list[str]:
        """Transports whose rows are not claimed now: those nothing can carry (paused), and those whose
        lane has no room under their shared rate (while other lanes have room)."""
        return [*self.paused(), *(name for name, lane in self._lanes.items() if self._rate_room(name, lane) == 0)]

    def note_claim(self, *, wanted: int, got: int) -> None:
        """What a claim found: fewer rows than it asked for means the queue is drained for now; a claim
        of one row that got it says nothing."""
        if wanted > 1 or got < wanted:
            self._drained = got < wanted

    def _worthwhile_claim(self) -> int:
        """The fewest rows worth a claim: while a backlog drains with sends in flight, half of what the
        daemon can hold (a claim costs PostgreSQL about as much for two rows as for twenty, and the rows
        waiting at the lanes keep every connection busy meanwhile); with nothing in flight, or once the
        queue was found drained (new rows come one at a time: each is picked up at once), one."""
        if not self._inflight.sending or self._drained:
            return 1
        capacity = sum(lane.capacity for lane in self._lanes.values()) or self.settings.concurrency
        return max(1, min(self.settings.concurrency, capacity, 2 * self.settings.batch_size) // 2)

    async def run(self) -> None:
        """Claim until stopped; then every later outcome is unlocked right after its write."""
        try:
            await self._claim_until_stopped()
        finally:
            with anyio.CancelScope(shield=True):
                await self._db.stop_claiming()

    async def _claim_until_stopped(self) -> None:
        while not self._stopping.is_set():
            await self._liveness.beat_or_wedge()
            # a send frees its slot when it returns; its outcome may still wait for the recorder
            free = min(self._inflight.room, self._lane_room())
            if free < self._worthwhile_claim():
                # every slot busy, every transport with room paused or waiting for its rate's next slot,
                # or too few slots free to be worth a claim
                wait = min([*self._pauses_left(), self.settings.poll_interval_seconds, self._liveness.interval])
                if self.paused() or not self._inflight.sending:  # no claim may follow soon: unlock what is committed
                    async with self._db.idle():
                        await self._inflight.wait_for_slot(wait)
                else:  # busy slots: a claim follows the next freed one and carries the unlocks
                    await self._inflight.wait_for_slot(wait)
                continue
            self._inflight.expect_work()  # before claiming, so a NOTIFY during the claim is not lost
            want = min(self.settings.batch_size, free)
            try:
                session = await self._db.claim_session()
                batch = await session.claim_due(want, self.ctx.worker, paused=self._unclaimable(),
                                                default_transport=self.ctx.default_transport,
                                                max_content_bytes=self.settings.max_message_bytes,
                                                message_ids=self.ctx.message_ids)
            except DatabaseError as exc:
                if not self._stopping.is_set():
                    await self._db.failed(exc, locking=True)  # a claim stopped midway may hold locks
                continue
            self.last_claim_ok = monotonic()
            self.note_claim(wanted=want, got=len(batch))
            # held before anything else is awaited: a claim not yet in InFlight looks dead to this
            # daemon's own rescuer (its session's advisory locks are re-entrant)
            self._inflight.hold(batch, self.last_claim_ok)
            if self._observer is not None:
                self._observer.claimed(len(batch))
            for delivery in batch:
                if not self._executor.refuse_unsendable(delivery):
                    self._lanes[self.ctx.route(delivery)].submit(delivery)
            await self._db.ensure_listening()  # after the batch went to the lanes: a slow connect delays no send
            if len(batch) < want:
                await self._idle(session)

    async def _idle(self, session: ClaimSession) -> None:
        """Wait for a NOTIFY, the next scheduled_at, the end of a transport pause, or the poll interval."""
        timeout = self.settings.poll_interval_seconds
        try:
            next_due = await session.next_due_at()
        except DatabaseError:
            next_due = None
        if next_due is not None:
            until_due = (next_due - self.ctx.clock()).total_seconds()
            pauses = self._pauses_left()
            if until_due > 0:
                timeout = min(timeout, until_due)
            elif pauses:
                timeout = min(timeout, min(pauses))  # due rows wait for their transport
            else:
                timeout = min(timeout, DUE_BUT_UNCLAIMABLE_RECHECK_SECONDS)  # their keys are locked elsewhere
        async with self._db.idle():
            await self._inflight.wait_for_work(min(timeout, self._liveness.interval))
        await self._liveness.refresh_pending(session)
