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

What a write counts as is read once (``tally.py``): the progress line, each
email's line and the metrics (``metrics.py``) count from it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence

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
GATHER_OUTCOMES = 8  # while sends are in flight, wait for this many outcomes per write ...
GATHER_SECONDS = 0.010  # ... but never longer than this (it widens the crash window by as much)
PROGRESS_SECONDS = 10.0


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

    async def _gather(self, first: OutcomeWrite) -> list[OutcomeWrite]:
        """What is ready, and while sends are in flight up to GATHER_OUTCOMES of them, waiting at most
        GATHER_SECONDS: one write costs PostgreSQL about as much for one outcome as for ten."""
        batch = [first]
        deadline = anyio.current_time() + GATHER_SECONDS
        while len(batch) < RECORD_BATCH:
            try:
                batch.append(self._outbox.receive_nowait())
                continue
            except anyio.EndOfStream:
                break
            except anyio.WouldBlock:
                pass
            wanted = min(GATHER_OUTCOMES, len(batch) + self._inflight.sending)
            left = deadline - anyio.current_time()
            if len(batch) >= wanted or left <= 0 or self._stopping.is_set():
                break
            with anyio.move_on_after(left):
                try:
                    batch.append(await self._outbox.receive())
                except anyio.EndOfStream:
                    break
        return batch

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
