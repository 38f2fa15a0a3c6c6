"""The rescuer: claims whose daemon is gone (or that a daemon gave up) are settled.

Every ``rescue_interval_seconds``, and at start, it asks the claim session for rows left
``sending`` longer than the rescue delay whose advisory lock nobody holds (each
then locked by this session), or left by a process of this host that is provably
dead (processes.py: instant recovery), whatever their age. A row that went out in a recorded batch is resent
as that identical batch, under the same key, while the provider still absorbs a
repeat (:meth:`ClaimRescue.replay`); every other dead claim is an ambiguous outcome for the
in-doubt policy (:meth:`ClaimRescue.unknown`). The writes go through the recorder, fenced on each
row's claim token like any outcome.

:class:`ClaimRescue` settles the claims one pass found, with what it shares with the executor
(a :class:`DaemonContext`: context.py) and no database: a batch's identical request, or the write
of an unknown outcome. :class:`Rescuer` is the loop around it and its claim session.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime

import anyio

from ..decide import decide
from ..delivery import Cause, ComposedMessage, Delivery, Outcome, SendSingly, batch_transport
from ..delivery_events.suppression import suppressed_among
from ..errors import DatabaseError, DatabaseUnavailable
from ..providers.seam import resend_safe_until
from ..store import AttemptRecord, ClaimSession, DeadClaim, OutcomeWrite, RecordedBatch
from ..store.processes import dead_workers, this_process
from .claimer import DaemonObserver
from .context import DaemonContext, resend_whole
from .failover import presumed_carrier
from .sessions import DaemonSessions

log = logging.getLogger("outbox_mailer")

FORGET_PROCESSES_SECONDS = 86_400.0  # a process not seen for a day is forgotten (its claims then wait the delay)
START_LOOK_EVERY_SECONDS = 0.5
START_LOOK_FOR_SECONDS = 10.0
RESCUE_BATCH = 500  # room for a whole batch of any provider (Postmark: 500)
BATCH_RECORD_SECONDS = 2 * 86_400.0  # recorded batches no row points at are forgotten after this

# Answers to a resent batch that settle nothing: the identical batch goes again at the next rescue.
_NOT_JUDGED = frozenset({Cause.TRANSIENT, Cause.UNREACHABLE, Cause.PAUSED, Cause.HELD_BACK})


class ClaimRescue:
    """The writes that settle dead claims: a recorded batch resent whole, or an unknown outcome."""

    def __init__(self, ctx: DaemonContext) -> None:
        self.ctx = ctx

    def unknown(self, delivery: Delivery, claimed_at: datetime, claimed_by: str, *,
                batch_transport: str | None = None, carrier: str | None = None) -> OutcomeWrite:
        """The write for a claim whose process died: its outcome is unknown, recorded under the transport
        the claim went to (``carrier``, failover.py), where the pin rule sends any resend. A row that went
        out in a batch (through ``batch_transport``) is never safe to resend under its own key (the
        provider knows it by the batch's key): it goes through the in-doubt policy."""
        batched = batch_transport is not None
        name = batch_transport or carrier or presumed_carrier(self.ctx.transport_of(delivery),
                                                              delivery.pinned_transport)
        transport = self.ctx.transports.get(name)
        window = None if batched or transport is None else transport.idempotency_window_seconds
        outcome = Outcome.ambiguous(
            f"claimed by {claimed_by} at {claimed_at.isoformat()}; that process stopped before recording "
            "the outcome",
            resend_safe_until=resend_safe_until(delivery, window),
        )
        now = self.ctx.clock()
        transition = decide(delivery, outcome, now, self.ctx.policy, self.ctx.rng.random())
        attempt = AttemptRecord(delivery.attempts, claimed_at, max(now, claimed_at), outcome.kind, None, None,
                                outcome.error, name, self.ctx.worker, rescue=True,
                                message_id=delivery.message_id)  # so that events for it still find the row
        return OutcomeWrite(delivery, transition, attempt)

    def may_resend(self, batch: RecordedBatch, claims: Sequence[DeadClaim]) -> bool:
        """The identical batch can go again: every member is here, the transport still batches, the
        provider's key window holds for every member."""
        transport = self.ctx.transports.get(batch.transport)
        if transport is None or batch_transport(transport) is None:
            return False
        if sorted(c.delivery.id for c in claims) != sorted(batch.member_ids):
            return False
        now = self.ctx.clock()
        window = transport.idempotency_window_seconds
        return all((until := resend_safe_until(c.delivery, window)) is not None and until > now for c in claims)

    async def replay(self, batch: RecordedBatch, members: Sequence[Delivery]) -> list[OutcomeWrite] | None:
        """The resend of a recorded batch: the identical request (the members in request order, each to
        the recipients recorded with the batch, not screened again) under the identical key, checked
        against the recorded digest. None when it could not be resent now (the rows stay for the next
        rescue)."""
        transport = batch_transport(self.ctx.transports[batch.transport])
        if transport is None:
            self._not_replayed(members)
            return None
        gate = self.ctx.gates[batch.transport]
        started = self.ctx.clock()
        sent_as = batch.as_sent(members)
        prepared = [await self.ctx.preparation.rebuilt(delivery, started) for delivery in sent_as]
        messages = [p for p in prepared if isinstance(p, ComposedMessage)]
        if len(messages) < len(prepared):
            # the identical batch cannot go out: each refused row fails as it would have, the others
            # (their first request's fate unknown) go through the in-doubt policy one by one
            return self._not_resent(batch, members, started, "some of its members may not be sent", prepared)
        if batch.digest is not None and batch.digest != transport.batch_digest(messages, sent_as, batch.key):
            log.warning("batch %d not resent: its request cannot be rebuilt as recorded", batch.id)
            return self._not_resent(batch, members, started, "its request can no longer be rebuilt identically "
                                    "(a member's row or the daemon's settings changed)")
        if await gate.admit(sum(len(m.recipients) for m in messages)) is not None:
            self._not_replayed(members)
            return None
        results = await transport.send_batch(messages, sent_as, batch.key)
        now = self.ctx.clock()
        if any(resend_whole(r, now) or (isinstance(r, Outcome) and r.cause in _NOT_JUDGED) for r in results):
            self._not_replayed(members)  # not settled (the first request may still be there: 409): later
            return None
        writes = []
        for delivery, message, result in zip(members, messages, results, strict=True):
            outcome = await transport.send(message, delivery) if isinstance(result, SendSingly) else result
            route = self.ctx.attempt_route(delivery, batch.transport)
            writes.append(self.ctx.write(delivery, route, started, gate.observe(outcome), message.message_id,
                                         rescue=True))
        return writes

    def _not_resent(self, batch: RecordedBatch, members: Sequence[Delivery], started: datetime, why: str,
                    prepared: Sequence[ComposedMessage | Outcome] = ()) -> list[OutcomeWrite]:
        """The writes when the identical batch cannot go again: a member refused as ``prepared`` says
        fails as it would have, the others go through the in-doubt policy one by one."""
        unknown = Outcome.ambiguous(f"batch {batch.key} not resent: {why}")
        refused = [p if isinstance(p, Outcome) else unknown for p in prepared] or [unknown] * len(members)
        return [self.ctx.write(d, self.ctx.attempt_route(d, batch.transport), started, outcome, rescue=True)
                for d, outcome in zip(members, refused, strict=True)]

    def _not_replayed(self, members: Sequence[Delivery]) -> None:
        """Not resent now (the rows stay for the next rescue): the notes of their screening wait for no write."""
        for delivery in members:
            self.ctx.preparation.dropped.pop(delivery.id, None)


class Rescuer:
    def __init__(self, ctx: DaemonContext, db: DaemonSessions, observer: DaemonObserver | None = None) -> None:
        self.settings = ctx.settings
        self.ctx = ctx
        self.rescue = ClaimRescue(ctx)
        self._db = db
        self._inflight = ctx.inflight
        self._observer = observer
        self._me = this_process()
        self._dead: list[str] = []  # workers whose processes here are provably dead, at the last look
        self._started_at: datetime | None = None  # set by register(); None: own name's claims wait the delay

    async def run(self) -> None:
        await self._at_start()
        while True:
            await anyio.sleep(self.settings.rescue_interval_seconds)
            await self._pass()

    async def _pass(self) -> bool:
        """One rescue pass; False when it failed (its session is dropped: a statement stopped after
        it took advisory locks would leave them held)."""
        try:
            await self.rescue_once()
        except DatabaseError as exc:
            log.warning("rescue skipped: %s", exc)
            await self._db.failed(exc, locking=True)
            return False
        return True

    async def _at_start(self) -> None:
        """A daemon starting (a restart after ``kill -9``, say) settles the claims of this host's
        provably dead processes now; while some are still locked (the dead session's server side
        not yet ended), it looks again every half second, for ten seconds at most."""
        deadline = anyio.current_time() + START_LOOK_FOR_SECONDS  # checked between passes, never cutting one
        while anyio.current_time() < deadline:
            if await self._pass():
                try:
                    session = await self._db.claim_session()
                    if not self._dead or not await session.dead_claims_left(self._dead, self._inflight.ids):
                        return
                except DatabaseError as exc:
                    log.warning("rescue skipped: %s", exc)
            await anyio.sleep(START_LOOK_EVERY_SECONDS)

    async def register(self) -> None:
        """Before the first claim: when this process started, by the database's clock (its own
        fresh claims under a shared worker name are never a dead process's), and who it is."""
        session = await self._db.claim_session()
        self._started_at = await session.server_now()
        self._dead = await self._dead_workers(session)

    async def _dead_workers(self, session: ClaimSession) -> list[str]:
        """Say this process is alive; the workers whose processes here are provably dead (processes.py)."""
        if self._me is None:
            return []
        try:
            known = await session.process_seen(self._me, self.ctx.worker, FORGET_PROCESSES_SECONDS)
        except DatabaseUnavailable:
            raise
        except DatabaseError as exc:  # no grant on schema 13's table yet (`outbox-mailer grant`): the delay applies
            log.warning("instant recovery off: %s", exc)
            self._me = None
            return []
        dead = dead_workers(known, self._me)
        for worker in sorted(set(dead) - set(self._dead)):
            log.warning("the processes of worker %s are gone (same boot and pid namespace, no such process): "
                        "their claims are rescued without waiting for the rescue delay", worker)
        return dead

    async def forget_me(self) -> None:
        """A clean stop: this process is no longer one to prove dead."""
        if self._me is not None and self._db.connected:
            with contextlib.suppress(DatabaseError):
                await (await self._db.claim_session()).process_gone(self._me)

    async def rescue_once(self) -> int:
        """Settle claims of dead processes (or given up to a rescuer); returns how many.

        A recorded batch is taken whole or not at all: the claims come with every
        member still in the batch, whatever claim each came from, and a batch of
        which some member is held elsewhere waits for the next pass. It is resent as
        that identical batch under its key, while the provider still absorbs a repeat
        (a resend under the same key is absorbed, so it goes again at every rescue until the window
        closes); past the window, a batch's rows go through the in-doubt policy, never resent under
        their own keys as if safe; any other dead claim is ambiguous and
        goes through the in-doubt policy.
        """
        session = await self._db.claim_session()
        self._dead = await self._dead_workers(session)
        dead = await session.find_dead_claims(self.settings.effective_rescue_after_seconds, RESCUE_BATCH,
                                              own=self._inflight.ids, max_content_bytes=self.settings.max_message_bytes,
                                              message_ids=self.ctx.message_ids, dead_workers=self._dead,
                                              worker=self.ctx.worker, started_at=self._started_at)
        await session.prune_batches(BATCH_RECORD_SECONDS)
        by_batch: dict[int, list[DeadClaim]] = {}
        for claim in dead:
            if claim.batch_id is not None:
                by_batch.setdefault(claim.batch_id, []).append(claim)
        waiting = {b for b, claims in by_batch.items() if len(claims) < claims[0].batch_rows}
        if waiting:  # a member is still held (by its live daemon, or an operator's statement): the batch waits
            log.info("rescue of batches %s waits: a member is still held elsewhere", sorted(waiting))
            await session.release_locks([c.delivery.dedupe_key for b in waiting for c in by_batch.pop(b)])
            dead = [c for c in dead if c.batch_id not in waiting]
        if not dead:
            return 0
        recorded = await session.batches(list(by_batch)) if by_batch else {}
        writes, resent = [], set()
        for batch_id, claims in by_batch.items():
            batch = recorded.get(batch_id)
            if batch is None or not self.rescue.may_resend(batch, claims):
                continue
            members = sorted((c.delivery for c in claims), key=lambda d: batch.member_ids.index(d.id))
            self._count_suppressed_since(batch, members)
            await session.batch_resent(batch.id)
            log.warning("resending batch %d (%d emails) under its recorded key (request %d)", batch.id,
                        len(members), batch.sends + 1)
            try:
                replayed = await self.rescue.replay(batch, members)
            except Exception as exc:  # noqa: BLE001  (the rows stay for the next rescue)
                log.warning("resend of batch %d failed: %s", batch.id, exc)
                replayed = None
            resent |= {d.id for d in members}
            if replayed is None:
                await self._db.give_up(members)
            else:
                writes += replayed
        writes += [self.rescue.unknown(c.delivery, c.claimed_at, c.claimed_by,
                                       batch_transport=self._batch_transport(c, recorded), carrier=c.carrier)
                   for c in dead
                   if c.delivery.id not in resent]
        if writes:
            log.warning("rescuing %d claims of stopped processes (policy %s)", len(writes), self.settings.in_doubt)
            with anyio.CancelScope(shield=True):
                await self.ctx.recorder.record(writes)
        return len(writes)

    def _count_suppressed_since(self, batch: RecordedBatch, members: list[Delivery]) -> None:
        """The identical request goes again, to recipients suppressed after it was recorded too (the
        crash window of a batch: the first request may have reached them already): say so, and count."""
        late = [s for d in batch.as_sent(members) for s in suppressed_among(d)]
        if late:
            log.warning("batch %d is resent to %d recipients suppressed after its request was recorded: %s",
                        batch.id, len(late), "; ".join(s.describe() for s in late))
            if self._observer is not None:
                self._observer.batch_replayed_to_suppressed(batch.transport, len(late))

    def _batch_transport(self, claim: DeadClaim, recorded: Mapping[int, RecordedBatch]) -> str | None:
        """The transport a dead claim's batch went through (None: it went alone); for a batch no
        longer recorded, its row's own transport."""
        if claim.batch_id is None:
            return None
        batch = recorded.get(claim.batch_id)
        return batch.transport if batch is not None else self.ctx.transport_of(claim.delivery)
