"""Writing outcomes: batched, fenced, retried while the database is away.

The executor :meth:`submits <Recorder.submit>` an :class:`OutcomeWrite`; the
recorder takes whatever is ready (up to ``RECORD_BATCH``), writes it in one
statement fenced on each row's claim (the claim session then releases the
rows' advisory locks by its own rule: see ``ClaimSession``), tells
:class:`~outbox_mailer.daemon.inflight.InFlight` the rows are done, and logs.
Logging: one line per recorded email, after its write (``email_log.py``:
a sent email and a retry at INFO, a failure, an in-doubt row and a lost claim
at WARNING, with the email's fields), and at INFO a progress line that sums up
what was recorded: every ``PROGRESS_SECONDS`` while busy, and once the daemon
has nothing left in flight.
Outcomes wait in memory while PostgreSQL is unreachable; there are never more
of them than sends in flight.

Coalescing, and the crash window it adds (:class:`Gathering`): while sends are
in flight, a write waits for half the daemon's concurrency of outcomes, but
never longer than ``GATHER_SECONDS`` after the first it holds. So an outcome
waits in memory at most ``GATHER_SECONDS`` (50 ms) before its write starts,
and at once when nothing else is in flight; a kill -9 leaves sent but
unrecorded at most the outcomes of that window and of the write under way
(all of them among the rows held, at most twice the concurrency).

What a write counts as is read once (``tally.py``): the progress line, each
email's line and the metrics (``metrics.py``) count from it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import anyio

from ..delivery_events.status_codes import is_bad_mailbox
from ..delivery_events.suppression import form_or_none
from ..errors import DatabaseError, DatabaseUnavailable
from ..store import OutcomeWrite
from .email_log import log_email
from .inflight import InFlight
from .sessions import RECONNECT_MAX_SECONDS, DaemonSessions
from .tally import Counted, tally

log = logging.getLogger("outbox_mailer")

RECORD_BATCH = 500
GATHER_SECONDS = 0.050  # an outcome waits at most this long for others to share its write (the crash window)
PROGRESS_SECONDS = 10.0

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Gathering:
    """How many outcomes a write waits for while sends are in flight, and for how long at most.

    One write costs PostgreSQL about as much for one outcome as for ten, and a daemon sending at a
    relay's pace gets its outcomes one at a time: waiting for half of what can be in flight (the
    claim loop claims again once that half is free) makes writes of that size.
    """

    outcomes: int
    seconds: float = GATHER_SECONDS

    @classmethod
    def for_concurrency(cls, concurrency: int) -> Gathering:
        return cls(max(1, min(RECORD_BATCH, concurrency // 2)))


async def gather(first: T, take: Callable[[float], Awaitable[T | None]], clock: Callable[[], float],
                 sending: Callable[[], int], stopping: Callable[[], bool], window: Gathering) -> list[T]:
    """``first`` and what follows it for one write: whatever is ready (up to RECORD_BATCH), and while sends
    are in flight up to ``window.outcomes``, waiting at most ``window.seconds`` after ``first``.
    ``take(s)``: the next outcome if one comes within ``s`` seconds, else None (also once the stream ended)."""
    batch = [first]
    deadline = clock() + window.seconds
    while len(batch) < RECORD_BATCH:
        wanted = min(window.outcomes, len(batch) + sending())
        wait = 0.0 if len(batch) >= wanted or stopping() else max(0.0, deadline - clock())
        more = await take(wait)
        if more is None:
            break
        batch.append(more)
    return batch


class Recorder:
    def __init__(self, db: DaemonSessions, stopping: anyio.Event, inflight: InFlight,
                 observe: Callable[[OutcomeWrite, bool], None] | None = None, *,
                 suppress_bad_mailboxes: bool = True) -> None:
        self._db = db
        self._suppress = suppress_bad_mailboxes  # OUTBOX_MAILER_SUPPRESSION__AUTOMATIC
        self._stopping = stopping
        self._inflight = inflight  # told after each batch from the stream (frees send slots)
        self._observe = observe  # called for every write, with whether it applied (metrics)
        self.counts: dict[str, int] = {c.value: 0 for c in Counted}
        self._reported = dict(self.counts)  # counts at the last progress line
        self._period_start: float | None = None  # None: nothing recorded since the last line
        self.inbox, self._outbox = anyio.create_memory_object_stream[OutcomeWrite](math.inf)

    def submit(self, write: OutcomeWrite) -> None:
        """Queue one outcome (never waits: the stream is unbounded, at most one write per row held)."""
        self.inbox.send_nowait(write)

    async def run(self) -> None:
        """Drain the stream until it is closed and empty; each write shielded from cancellation."""
        async for first in self._outbox:
            batch = await self._gather(first)
            with anyio.CancelScope(shield=True):
                await self.record(batch)
            self._inflight.recorded(batch)
            self._progress(anyio.current_time(), drained=not len(self._inflight))

    @property
    def window(self) -> Gathering:
        return Gathering.for_concurrency(self._inflight.concurrency)

    async def _gather(self, first: OutcomeWrite) -> list[OutcomeWrite]:
        return await gather(first, self._take, anyio.current_time, lambda: self._inflight.sending,
                            self._stopping.is_set, self.window)

    async def _take(self, seconds: float) -> OutcomeWrite | None:
        """The next outcome if one is ready or comes within ``seconds``; None otherwise, or once the stream ended."""
        try:
            return self._outbox.receive_nowait()
        except anyio.EndOfStream:
            return None
        except anyio.WouldBlock:
            if seconds <= 0:
                return None
        with anyio.move_on_after(seconds):
            try:
                return await self._outbox.receive()
            except anyio.EndOfStream:
                return None
        return None

    def _progress(self, now: float, *, drained: bool) -> None:
        """What was recorded since the last line: every PROGRESS_SECONDS while busy, and at once when
        the daemon holds nothing more (``drained``). A period starts with its first recorded batch."""
        if self._period_start is None:
            self._period_start = now
        if not drained and now - self._period_start < PROGRESS_SECONDS:
            return
        since = {k: v - self._reported[k] for k, v in self.counts.items()}
        if any(since.values()):
            log.info("recorded %s in the last %.1fs", " ".join(f"{k}={v}" for k, v in since.items()),
                     now - self._period_start)
        self._reported = dict(self.counts)
        self._period_start = None if drained else now

    async def record(self, batch: Sequence[OutcomeWrite]) -> None:
        """Write outcomes (their locks are then the claim session's to release). Retries while the database is away.

        Gives up, leaving the rows in ``sending`` for a rescuer, only on an error
        that is not a lost connection and repeats, or when stopping and the
        database stays away.
        """
        delay, tries, updated = 0.1, 0, None
        while updated is None:
            tries += 1
            try:
                session = await self._db.claim_session()
                updated = await session.record_outcomes(batch)
            except DatabaseError as exc:
                unavailable = isinstance(exc, DatabaseUnavailable)
                await self._db.failed(exc)
                if (not unavailable and tries >= 3) or (self._stopping.is_set() and tries >= 10):
                    log.error("could not record %d outcomes (%s); their rows stay 'sending' for a rescuer",
                              len(batch), exc)
                    break
                await anyio.sleep(delay)
                delay = min(delay * 2, RECONNECT_MAX_SECONDS)
        if updated is not None and tries > 1:
            updated |= await self._committed_before(batch, updated)
        for write in batch:
            self._log(write, updated is not None and write.delivery.id in updated)
        if updated:
            await self._bounced(batch, updated)
            await self._adopt_events()

    async def _bounced(self, batch: Sequence[OutcomeWrite], updated: set[int]) -> None:
        """Recipients refused for good at RCPT with a bad-mailbox code (5.1.1, 5.1.10...) count as hard
        bounces, as a provider's event would: recorded, and suppressed. Best effort: the outcomes are
        committed already, and a bounce lost here comes back on the next send to the address."""
        refusals = [(w.delivery.id, w.attempt.attempt, r.address, address, w.attempt.finished_at,
                     f"{r.reply_code} {r.message}")
                    for w in batch if w.delivery.id in updated for r in w.attempt.refused
                    if r.permanent and is_bad_mailbox(r.message.partition(" ")[0])
                    and (address := form_or_none(r.address)) is not None]
        if not refusals:
            return
        try:
            await (await self._db.claim_session()).record_refusals(refusals, self._suppress)
        except DatabaseError as exc:
            log.warning("could not record %d bad-mailbox refusals as bounces: %s", len(refusals), exc)

    async def _adopt_events(self) -> None:
        """Events that came before these outcomes (a DSN or a fast webhook while the row was 'sending')
        and matched no row then: matched now, their delivery_event set and their suppression applied.
        Best effort, like :meth:`_bounced`: the outcomes are committed already."""
        try:
            session = await self._db.claim_session()
            adopted = await session.adopt_events(self._suppress) if session.quoted else 0
        except DatabaseError as exc:
            log.warning("could not match the events that came before their outcomes: %s", exc)
            return
        if adopted:
            log.info("matched %d events that came before their outcomes", adopted)

    async def _committed_before(self, batch: Sequence[OutcomeWrite], updated: set[int]) -> set[int]:
        """After a retried write: rows the fence refused because an earlier try had committed
        (the reply was lost with the connection) are ours, not lost claims."""
        missing = [w for w in batch if w.delivery.id not in updated]
        if not missing:
            return set()
        try:
            return await (await self._db.claim_session()).attempts_recorded(missing)
        except DatabaseError:
            return set()

    def _log(self, write: OutcomeWrite, applied: bool) -> None:
        if self._observe is not None:
            self._observe(write, applied)
        tallied = tally(write, applied)
        if tallied.counted is not None:
            self.counts[tallied.counted] += 1
        log_email(write, tallied)
