"""The claim loop: claim due rows while there is room, route each, wait for work when there is none.

Each turn: beat the watchdog; work out the turn's claims; if none is worth
making (the send budget, :class:`InFlight`, or every open transport's lane is
full), wait for a slot; otherwise make them, hold the rows in flight, fail at
once the ones that cannot be sent, and queue the others on their transport's
lane.

``concurrency`` counts requests (inflight.py). A batching lane (a provider's
batch endpoint) takes up to ``batch_limit`` rows a request, so it gets a claim
of its own, of the transports routed to it alone, whenever a quarter of what it
can hold is free (a batch at a time at the defaults): a claim per request slot,
never a few rows that would spend a request of a rate on a small batch. Its
rows found to go singly count a request each (inflight.py), and while some wait
its claims are sized a row a request. One
more claim takes rows for the lanes that send singly, at most what the requests
left would carry one row each. A claim that came back short is not made again
until work may be due (a NOTIFY, a retry) or the poll interval has passed, so a
lane without rows costs no statement a turn.

A lane's room under a shared rate is what the requests that rate starts within
a new claim's start window would carry (none while its next request slot is
further away: the loop waits for that moment). When every claim of a turn
returns fewer rows than asked, the queue is drained for now: wait for a NOTIFY,
the next ``scheduled_at``, the end of a transport pause, or the poll interval.
While waiting, the claim session is *idle*: no claim is coming to carry the
unlocks of committed outcomes (see ``ClaimSession``), so an idle daemon holds
no advisory locks.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import anyio

from ..clock import monotonic
from ..delivery import Delivery
from ..errors import DatabaseError
from ..settings.config import Settings
from ..store import ClaimSession, OutcomeWrite
from .context import DaemonContext
from .executor import Executor
from .gate import TransportGate
from .inflight import NO_LANE, InFlight
from .lanes import Lane
from .liveness import Liveness
from .sessions import DaemonSessions

log = logging.getLogger("outbox_mailer")

DUE_BUT_UNCLAIMABLE_RECHECK_SECONDS = 0.1
SLOT_MARGIN_SECONDS = 0.5  # at most; half the start window when that is shorter (_window())
OTHER_LANES = NO_LANE  # the name of the claim for the lanes that send singly


@dataclass(frozen=True, slots=True)
class Claim:
    """One claim of a turn: up to ``want`` rows, for lane ``lane`` alone (or OTHER_LANES), leaving out
    the rows of the transports in ``leave_out``."""

    lane: str
    want: int
    leave_out: list[str]


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
        self._short: dict[str, tuple[int, float]] = {}  # claim (lane) -> (notices, monotonic) when it came back short
        self._drained = True  # the last claim for the single lanes found the queue drained (note_claim())

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
        """How far ahead a lane's request slots count for a claim: its start window, less a margin for
        what comes between the claim and the send (the grant's round trip to the shared limit, whose slot
        may fall a little later than this daemon reckons, and the hand-over to the lane). Without it a
        slot reckoned 10 ms inside the window was granted 5 ms outside it, and the claim went back."""
        window = self._inflight.start_window(self.ctx.transports[name].send_timeout_seconds)
        return window - min(window / 2, SLOT_MARGIN_SECONDS)

    def _room(self, name: str, lane: Lane) -> int:
        rate_room = self._rate_room(name, lane)
        return lane.room if rate_room is None else rate_room

    def _rate_room(self, name: str, lane: Lane) -> int | None:
        """Under a shared rate, the rows lane ``name`` may take: what the requests that rate starts before
        a new claim is too old to start its send would carry (rows claimed beyond that would wait for a
        slot until they could not be sent, and go back untried). None: no shared rate."""
        requests = self._gates[name].requests_within(self._window(name))
        if requests is None:
            return None
        singly = self._inflight.singly_on(name)  # a request each; while some wait, more rows may go singly
        return lane.room_within(requests - singly, 1 if singly else None)

    def _unclaimable(self) -> list[str]:
        """Transports whose rows are not claimed now: those nothing can carry (paused), and those whose
        lane has no room under their shared rate (while other lanes have room)."""
        return [*self.paused(), *(name for name, lane in self._lanes.items() if self._rate_room(name, lane) == 0)]

    def note_claim(self, *, wanted: int, got: int) -> None:
        """What a claim for the single lanes found: fewer rows than it asked for means the queue is drained
        for now; a claim of one row that got it says nothing."""
        if wanted > 1 or got < wanted:
            self._drained = got < wanted

    def _worthwhile_claim(self, lane: str = OTHER_LANES) -> int:
        """The fewest rows worth a claim (a claim costs PostgreSQL about as much for two rows as for twenty,
        and the rows waiting at the lanes keep every connection busy meanwhile). With nothing in flight, one
        (pickup latency). For the single lanes, while a backlog drains with sends in flight, half of what
        they can hold; once a claim found the queue drained (new rows come one at a time: each is picked up
        at once), one. For a batching lane, a quarter of what it holds: up to ``concurrency`` requests of
        ``batch_limit`` rows, within its capacity (of a row each while some of its rows go singly: they may
        be more such rows)."""
        if not self._inflight.sending:
            return 1
        if lane != OTHER_LANES:
            own = self._lanes[lane]
            per_request = 1 if self._inflight.singly_on(lane) else own.batch_limit
            full = min(own.capacity, self.settings.concurrency * per_request)
            return max(1, min(full, 4 * self.settings.batch_size) // 4)
        if self._drained:
            return 1
        capacity = sum(lane.capacity for lane in self._singles().values()) or self.settings.concurrency
        return max(1, min(self.settings.concurrency, capacity, 2 * self.settings.batch_size) // 2)

    def _came_back_short(self, claim: str) -> bool:
        """The claim found fewer rows than it asked for, and nothing since says work may be due (a NOTIFY,
        a retry recorded, the poll interval passed)."""
        short = self._short.get(claim)
        return short is not None and short[0] == self._inflight.notices \
            and monotonic() - short[1] < self.settings.poll_interval_seconds

    def _own_claims(self) -> list[str]:
        """The batching lanes that get a claim of their own this turn: open, with a worthwhile room in the
        request budget, less than a batch of rows waiting for their request to start, and not found empty
        since work was last due."""
        now = monotonic()
        return [name for name, lane in self._lanes.items()
                if lane.batch_limit > 1 and not self._gates[name].is_paused(now) and not self._came_back_short(name)
                and self._inflight.waiting_on(name) < lane.batch_limit
                and min(self._room(name, lane), self._inflight.room_on(name)) >= self._worthwhile_claim(name)]

    def _claim_of(self, name: str) -> Claim:
        """A claim for batching lane ``name`` alone: the transports routed to it now, as many rows as its
        room (within the request budget) takes."""
        now = monotonic()
        leave_out = {t for t in self._gates if self.ctx.routes.route(t, now) != name} | set(self._unclaimable())
        want = min(self.settings.batch_size, self._room(name, self._lanes[name]), self._inflight.room_on(name))
        return Claim(name, want, sorted(leave_out))

    def _singles(self) -> dict[str, Lane]:
        """The lanes that send singly."""
        return {name: lane for name, lane in self._lanes.items() if lane.batch_limit == 1}

    def _other_claim(self) -> Claim | None:
        """The claim for the lanes that send singly: a row a request, at most what the requests left carry
        and what those lanes can take (with no lane at all, every row fails as an unknown transport). The
        batching lanes' rows are left to their own claims, which wait for a batch's worth of room. None:
        every lane batches."""
        if self._lanes and not self._singles():
            return None
        now = monotonic()
        leave_out = {t for t in self._gates
                     if (lane := self._lanes.get(self.ctx.routes.route(t, now))) is not None and lane.batch_limit > 1}
        room = sum(self._room(name, lane) for name, lane in self._singles().items()
                   if not self._gates[name].is_paused(now)) if self._lanes else self._inflight.room
        return Claim(OTHER_LANES, min(self.settings.batch_size, self._inflight.room, room),
                     sorted(leave_out | set(self._unclaimable())))

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
            own = self._own_claims()
            other = None if self._came_back_short(OTHER_LANES) else self._other_claim()
            if other is not None and other.want < self._worthwhile_claim():
                other = None
            if not own and other is None:
                # every slot busy, every transport with room paused or waiting for its rate's next slot,
                # too few slots free to be worth a claim, or nothing found since work was last due
                wait = min([*self._pauses_left(), self.settings.poll_interval_seconds, self._liveness.interval])
                if self.paused() or not self._inflight.sending:  # no claim may follow soon: unlock what is committed
                    async with self._db.idle():
                        await self._inflight.wait_for_slot(wait)
                else:  # busy slots: a claim follows the next freed one and carries the unlocks
                    await self._inflight.wait_for_slot(wait)
                continue
            self._inflight.expect_work()  # before claiming, so a NOTIFY during the claim is not lost
            # drained: every claim made comes back short, and no claim was passed over for lack of room
            drained = not self._passed_over(own, other)
            session = None
            for name in [*own, *([OTHER_LANES] if other is not None else [])]:
                # each claim sized when it is made: the rows of the one before are held by then
                claim = self._claim_of(name) if name != OTHER_LANES else self._other_claim()
                if claim is None or claim.want < 1:
                    continue
                try:
                    session = await self._db.claim_session()
                    found = await self._claim(session, claim)
                except DatabaseError as exc:
                    if not self._stopping.is_set():
                        await self._db.failed(exc, locking=True)  # a claim stopped midway may hold locks
                    session = None
                    break  # the next turn tries again
                if name == OTHER_LANES:
                    self.note_claim(wanted=claim.want, got=found)
                if found < claim.want:
                    self._short[name] = (self._inflight.notices, monotonic())
                else:
                    drained = False
            if session is None:
                continue
            await self._db.ensure_listening()  # after the rows went to the lanes: a slow connect delays no send
            if drained:
                await self._idle(session)
                self._short.clear()  # after waiting for work, every claim is worth trying again

    def _passed_over(self, own: list[str], other: Claim | None) -> bool:
        """Some claim is not made this turn for lack of room (not because it found nothing lately): a
        freed slot, not a NOTIFY, is what it waits for."""
        now = monotonic()
        if other is None and not self._came_back_short(OTHER_LANES) and (self._singles() or not self._lanes):
            return True
        return any(lane.batch_limit > 1 and name not in own and not self._gates[name].is_paused(now)
                   and not self._came_back_short(name) for name, lane in self._lanes.items())

    async def _claim(self, session: ClaimSession, claim: Claim) -> int:
        """Make one claim, hold its rows and send each to its lane; how many rows it found."""
        batch = await session.claim_due(claim.want, self.ctx.worker, paused=claim.leave_out,
                                        default_transport=self.ctx.default_transport,
                                        max_content_bytes=self.settings.max_message_bytes,
                                        message_ids=self.ctx.message_ids,
                                        max_claim_bytes=self._inflight.content_room)
        self.last_claim_ok = monotonic()
        lanes = [self._lane_of(delivery) for delivery in batch]
        # held before anything else is awaited: a claim not yet in InFlight looks dead to this
        # daemon's own rescuer (its session's advisory locks are re-entrant)
        self._inflight.hold(batch, self.last_claim_ok, lanes)
        if self._observer is not None:
            self._observer.claimed(len(batch))
        for delivery, lane in zip(batch, lanes, strict=True):
            if not self._executor.refuse_unsendable(delivery):
                self._lanes[lane].submit(delivery)
        for lane in set(lanes):
            self._short.pop(lane, None)  # rows for it came: its own claim may find more
        return len(batch)

    def _lane_of(self, delivery: Delivery) -> str:
        """The lane a claimed row goes to (NO_LANE: none, it fails at once)."""
        lane = self.ctx.route(delivery)
        return lane if lane in self._lanes and delivery.defect is None else NO_LANE

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
