"""One claimed row, from its claim to the write that records its outcome.

The row's whole path is here, in the order it happens (the shape of River's
job executor)::

    claimed row ─▶ unreadable or unknown transport? ─────────────────────┐
        │                                                                │
        ▼                                                                ▼
    expired? ─▶ compose (preparation.py) ─▶ claim young? ─▶ gate.admit (shared limits, pause) ─▶ claim still young?
        ─▶ transport.send ─▶ gate.observe (breaker) ─▶ decide() ─▶ OutcomeWrite ─▶ recorder

Every way out of a send (sent, refused, unreachable, held back, cancelled at
shutdown, an unexpected exception) ends here in exactly one of two ways: an
:class:`OutcomeWrite` handed to the recorder, or the row left ``sending`` for a
rescuer (cut off by the shutdown grace period; or a batch whose answer was
ambiguous, given up so that a rescuer resends it whole). Decisions are
``decide()``'s (pure); the only database I/O on the path is the batch ledger's
record of a batch before its request (:class:`BatchLedger`).

Batches (a transport with a batch endpoint, :meth:`carry_batch`): each member is
composed on its own; members the transport cannot batch go singly; the batch is
admitted once (a rate limit counts requests), recorded with its key, sent, and
each member's answer becomes its own outcome. A member whose claim grew too old
to start a send (before or while the batch waited for admission) is left out of
the request and goes back untried: nothing is written or charged for it. A
member the provider did not judge (the batch refused as a whole) is sent singly
at once. An ambiguous answer that a resend under the same key would absorb gives
the whole batch up to the rescuer, which resends the identical batch
(:meth:`replay_batch`), never its members under other keys.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Protocol

import anyio

from ..clock import monotonic, utc_now
from ..decide import RetryPolicy, decide
from ..delivery import (
    BatchOutcome,
    Cause,
    ComposedMessage,
    Delivery,
    Outcome,
    OutcomeKind,
    SendSingly,
    Transport,
)
from ..errors import DatabaseError
from ..providers.seam import batch_idempotency_key, resend_safe_until
from ..settings.config import Settings
from ..store import AttemptRecord, OutcomeWrite, Recipients, RecordedBatch
from .failover import CarrierLedger, Routes, presumed_carrier, record_carrier
from .gate import TransportGate
from .inflight import InFlight
from .preparation import Preparation
from .recorder import Recorder

log = logging.getLogger("outbox_mailer")

TOO_LATE = "waited too long after the claim to start a send safely"


class BatchLedger(CarrierLedger, Protocol):
    """Where a batch is recorded before its request (the claim session, through DaemonSessions)."""

    async def open_batch(self, transport: str, key: str, members: Sequence[Delivery],
                         recipients: Sequence[Recipients] | None = None, digest: str | None = None) -> int | None:
        """The batch's id; None when a member's claim was lost. Raises DatabaseError."""

    async def give_up(self, members: Sequence[Delivery],
                      attempts: Sequence[tuple[Delivery, AttemptRecord]] = ()) -> None:
        """Write the attempts made, and unlock claims left 'sending' for a rescuer."""


# Answers to a resent batch that settle nothing: the identical batch goes again at the next rescue.
_NOT_JUDGED = frozenset({Cause.TRANSIENT, Cause.UNREACHABLE, Cause.PAUSED, Cause.HELD_BACK})


def resend_whole(result: BatchOutcome, now: datetime) -> bool:
    """An answer after which only the identical batch, under the same key, may go again."""
    return (isinstance(result, Outcome) and result.cause is Cause.AMBIGUOUS
            and result.resend_safe_until is not None and result.resend_safe_until > now)


class Executor:
    def __init__(
        self,
        settings: Settings,
        transports: Mapping[str, Transport],
        gates: Mapping[str, TransportGate],
        inflight: InFlight,
        recorder: Recorder,
        *,
        ledger: BatchLedger | None = None,
        worker: str,
        default_transport: str,
        clock: Callable[[], datetime] = utc_now,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self.transports = transports
        self.gates = gates
        self.worker = worker
        self.default_transport = default_transport
        self.clock = clock
        self._inflight = inflight
        self._recorder = recorder
        self._ledger = ledger
        self._rng = rng or random.Random()
        self.policy = RetryPolicy(
            base_seconds=settings.retry.base_seconds,
            max_seconds=settings.retry.max_seconds,
            default_max_attempts=settings.max_attempts,
            in_doubt=settings.in_doubt,
        )
        self.preparation = Preparation(settings)  # screened, guarded, composed; what it left out, by row
        self.guard = self.preparation.guard
        self.message_ids = settings.message_id_key()  # what the claim computes Message-IDs with
        self.routes = Routes.of(settings, gates)

    def transport_of(self, delivery: Delivery) -> str:
        return delivery.transport or self.default_transport

    def route(self, delivery: Delivery) -> str:
        """The transport to carry the row now: its own, or a fallback while its own is paused or held
        off by a long 429; a row with an attempt whose outcome is unknown stays where the latest such
        attempt went (failover.py)."""
        return self.routes.carrier(self.transport_of(delivery), delivery.pinned_transport, monotonic())

    # -- the ways a claimed row ends ---------------------------------------------

    async def carry(self, delivery: Delivery, message: ComposedMessage | None = None, *,
                    name: str | None = None) -> None:
        """Send one row through transport ``name`` (a lane's worker calls this with its own; a batch
        passes a member it composed already) and hand its outcome to the recorder."""
        name = name or self.route(delivery)
        started = self.clock()
        try:
            outcome, message = await self._attempt(delivery, name, started, message)
        except anyio.get_cancelled_exc_class():
            # cut off by the grace period: the row stays 'sending' for the rescuer
            log.warning("abandoned key=%s attempt=%d: cancelled during the send", delivery.dedupe_key,
                        delivery.attempts)
            self.preparation.dropped.pop(delivery.id, None)
            self._inflight.abandon(delivery)
            raise
        except Exception as exc:  # a poison row must not stop the daemon
            log.exception("unexpected error sending key=%s", delivery.dedupe_key)
            outcome = Outcome.permanent(f"internal error: {type(exc).__name__}: {exc}")
        self._finish(delivery, name, started, self.gates[name].observe(outcome),
                     message.message_id if message is not None else None)

    def refuse_unsendable(self, delivery: Delivery) -> bool:
        """Fail at once, without a network call, a row that cannot be read or names no configured
        transport; True when it did (the row needs no lane)."""
        name = self.transport_of(delivery)
        if delivery.defect is not None:
            outcome = Outcome.unsendable(f"cannot send this row as stored: {delivery.defect}")
        elif name not in self.gates:
            known = ", ".join(sorted(self.transports)) or "none"
            outcome = Outcome.unsendable(f"transport: unknown transport {name!r} (configured: {known})")
        else:
            return False
        self._finish(delivery, name, self.clock(), outcome)
        return True

    def give_back(self, delivery: Delivery) -> None:
        """A row still queued when the sends stopped was never attempted: back to pending, not charged."""
        self._finish(delivery, self.transport_of(delivery), self.clock(),
                     Outcome.held_back("not started before shutdown"))

    def rescued(self, delivery: Delivery, claimed_at: datetime, claimed_by: str, *,
                batch_transport: str | None = None, carrier: str | None = None) -> OutcomeWrite:
        """The write for a claim whose process died: its outcome is unknown, recorded under the transport
        the claim went to (``carrier``, failover.py), where the pin rule sends any resend. A row that went
        out in a batch (through ``batch_transport``) is never safe to resend under its own key (the
        provider knows it by the batch's key): it goes through the in-doubt policy."""
        batched = batch_transport is not None
        name = batch_transport or carrier or presumed_carrier(self.transport_of(delivery), delivery.pinned_transport)
        transport = self.transports.get(name)
        window = None if batched else getattr(transport, "idempotency_window_seconds", None)
        outcome = Outcome.ambiguous(
            f"claimed by {claimed_by} at {claimed_at.isoformat()}; that process stopped before recording "
            "the outcome",
            resend_safe_until=resend_safe_until(delivery, window),
        )
        now = self.clock()
        transition = decide(delivery, outcome, now, self.policy, self._rng.random())
        attempt = AttemptRecord(delivery.attempts, claimed_at, max(now, claimed_at), outcome.kind, None, None,
                                outcome.error, name, self.worker, rescue=True,
                                message_id=delivery.message_id)  # so that events for it still find the row
        return OutcomeWrite(delivery, transition, attempt)

    # -- batches ------------------------------------------------------------------

    async def carry_batch(self, deliveries: list[Delivery], name: str | None = None) -> None:
        """Send rows queued together on a batching transport's lane (a lane's worker calls this, with
        its transport's ``name``: a row routed there while its own transport was paused may name another)."""
        name = name or self.route(deliveries[0])
        transport = self.transports[name]
        started = self.clock()
        members: list[Delivery] = []
        screened: list[Delivery] = []  # as the request carries them: suppressed recipients left out
        messages: list[ComposedMessage] = []
        for delivery in deliveries:
            prepared = self.preparation.screened(delivery, started)
            if isinstance(prepared, Outcome):
                self._finish(delivery, name, started, prepared)
            # after an unknown outcome (the row is pinned) a row goes singly: when that attempt went
            # singly, only its own key lets the provider absorb the repeat
            elif delivery.pinned_transport is None and transport.batchable(  # type: ignore[attr-defined]
                    prepared[1], delivery):
                members.append(delivery)
                screened.append(prepared[0])
                messages.append(prepared[1])
            else:
                await self.carry(delivery, prepared[1], name=name)
        if len(members) == 1 or not self.gates[name].fits_one_request(sum(len(m.recipients) for m in messages)):
            for delivery, message in zip(members, messages, strict=True):
                await self.carry(delivery, message, name=name)
        elif members:
            await self._send_batch(name, transport, members, messages, started, screened)

    async def _send_batch(self, name: str, transport: Transport, members: list[Delivery],
                          messages: list[ComposedMessage], started: datetime, screened: list[Delivery]) -> None:
        try:
            results = await self._request_batch(name, transport, members, messages, screened)
        except anyio.get_cancelled_exc_class():
            log.warning("abandoned %d batch members: cancelled during the send", len(members))
            for delivery in members:
                self.preparation.dropped.pop(delivery.id, None)
                self._inflight.abandon(delivery)
            raise
        except Exception as exc:  # a poison batch must not stop the daemon
            log.exception("unexpected error sending a batch of %d", len(members))
            results = [Outcome.permanent(f"internal error: {type(exc).__name__}: {exc}")] * len(members)
        late = {i: r for i, r in enumerate(results) if isinstance(r, Outcome) and r.cause is Cause.UNSTARTED}
        for i, outcome in late.items():  # too old to start: back untried, not in the request
            self._finish(members[i], name, started, outcome)
        members = [d for i, d in enumerate(members) if i not in late]
        messages = [m for i, m in enumerate(messages) if i not in late]
        results = [r for i, r in enumerate(results) if i not in late]
        if any(resend_whole(r, self.clock()) for r in results):
            await self._give_up(name, members, messages, results, started)
            return
        for delivery, message, result in zip(members, messages, results, strict=True):
            if isinstance(result, SendSingly):
                await self.carry(delivery, message, name=name)
            else:
                self._finish(delivery, name, started, self.gates[name].observe(result), message.message_id)

    async def _request_batch(self, name: str, transport: Transport, members: list[Delivery],
                             messages: list[ComposedMessage], screened: list[Delivery]) -> list[BatchOutcome]:
        """Admit once, record the batch with its key, each member's recipients as screened and the request's
        digest, then make the one request (built from the screened rows); a member too old to start (before
        or after the wait for admission) is not in it: it goes back untried (unstarted)."""
        results: list[BatchOutcome] = [Outcome.unstarted(TOO_LATE)] * len(members)
        left = [self._inflight.start_left(d, transport.send_timeout_seconds) for d in members]
        going = [i for i, seconds in enumerate(left) if seconds > 0]  # no slot taken for the late
        if not going:
            return results
        held_back = await self.gates[name].admit(sum(len(messages[i].recipients) for i in going), max(left))
        if held_back is None:
            going = [i for i in going if self._may_start(members[i], transport)]  # it waited for its slot
            answers = await self._open_and_send(name, transport, [members[i] for i in going],
                                                [messages[i] for i in going],
                                                [screened[i] for i in going]) if going else []
        else:
            answers = [held_back] * len(going)
        for i, answer in zip(going, answers, strict=True):
            results[i] = answer
        return results

    async def _open_and_send(self, name: str, transport: Transport, members: list[Delivery],
                             messages: list[ComposedMessage], screened: list[Delivery]) -> list[BatchOutcome]:
        """Record the batch with its key, each member's recipients as screened and the request's digest,
        then make the one request."""
        key = batch_idempotency_key([d.dedupe_key for d in members])
        digest = transport.batch_digest(messages, screened, key)  # type: ignore[attr-defined]
        recipients = [(d.to_addresses, d.cc_addresses, d.bcc_addresses) for d in screened]
        try:
            batch_id = (await self._ledger.open_batch(name, key, members, recipients, digest)
                        if self._ledger is not None else None)
        except DatabaseError as exc:
            return [Outcome.held_back(f"could not record the batch before its request: {exc}")] * len(members)
        if batch_id is None:
            return [Outcome.held_back("a member's claim was lost before the batch request")] * len(members)
        return await transport.send_batch(messages, screened, key)  # type: ignore[attr-defined]

    async def _give_up(self, name: str, members: list[Delivery], messages: list[ComposedMessage],
                       results: Sequence[BatchOutcome], started: datetime) -> None:
        """An ambiguous answer: each member's attempt is written as ambiguous, the rows stay 'sending'
        and unlocked, so a rescuer resends the identical batch under its recorded key once the rescue
        delay has passed."""
        reason = next(r.error for r in results if isinstance(r, Outcome) and r.cause is Cause.AMBIGUOUS)
        log.warning("batch of %d left for a rescuer to resend under the same key: %s", len(members), reason)
        finished = max(self.clock(), started)
        attempts = []
        for delivery, message, result in zip(members, messages, results, strict=True):
            outcome = result if isinstance(result, Outcome) else Outcome.ambiguous(reason)
            attempts.append((delivery, AttemptRecord(delivery.attempts, started, finished, OutcomeKind.AMBIGUOUS,
                                                     outcome.reply_code, outcome.enhanced_code, outcome.error, name,
                                                     self.worker, message_id=message.message_id,
                                                     refused=self.preparation.dropped.pop(delivery.id, ()))))
            self._inflight.abandon(delivery)
        if self._ledger is not None:
            await self._ledger.give_up(members, attempts)

    async def replay_batch(self, batch: RecordedBatch, members: Sequence[Delivery]) -> list[OutcomeWrite] | None:
        """The rescuer's resend of a recorded batch: the identical request (the members in request
        order, each to the recipients recorded with the batch, not screened again) under the identical
        key, checked against the recorded digest. None when it could not be resent now (the rows stay
        for the next rescue)."""
        transport = self.transports[batch.transport]
        started = self.clock()
        sent_as = batch.as_sent(members)
        # never past the staging guard
        prepared = [self.preparation.guarded(delivery) for delivery in sent_as]
        prepared = [p if isinstance(p, Outcome) else self.preparation.composed(p, started) for p in prepared]
        if any(isinstance(p, Outcome) for p in prepared):
            # the identical batch cannot go out: each refused row fails as it would have, the others
            # (their first request's fate unknown) go through the in-doubt policy one by one
            return self._not_resent(batch, members, started, "some of its members may not be sent", prepared)
        messages = [p for p in prepared if not isinstance(p, Outcome)]
        if batch.digest is not None and batch.digest != transport.batch_digest(  # type: ignore[attr-defined]
                messages, sent_as, batch.key):
            log.warning("batch %d not resent: its request cannot be rebuilt as recorded", batch.id)
            return self._not_resent(batch, members, started, "its request can no longer be rebuilt identically "
                                    "(a member's row or the daemon's settings changed)")
        if await self.gates[batch.transport].admit(sum(len(m.recipients) for m in messages)) is not None:
            return self._not_replayed(members)
        results = await transport.send_batch(messages, sent_as, batch.key)  # type: ignore[attr-defined]
        now = self.clock()
        if any(resend_whole(r, now) or (isinstance(r, Outcome) and r.cause in _NOT_JUDGED) for r in results):
            return self._not_replayed(members)  # not settled (the first request may still be there: 409): later
        writes = []
        for delivery, message, result in zip(members, messages, results, strict=True):
            outcome = await transport.send(message, delivery) if isinstance(result, SendSingly) else result
            writes.append(self._write(delivery, batch.transport, started, self.gates[batch.transport].observe(outcome),
                                      message.message_id, rescue=True))
        return writes

    def _not_resent(self, batch: RecordedBatch, members: Sequence[Delivery], started: datetime, why: str,
                    prepared: Sequence[ComposedMessage | Outcome] = ()) -> list[OutcomeWrite]:
        """The writes when the identical batch cannot go again: a member refused as ``prepared`` says
        fails as it would have, the others go through the in-doubt policy one by one."""
        unknown = Outcome.ambiguous(f"batch {batch.key} not resent: {why}")
        refused = [p if isinstance(p, Outcome) else unknown for p in prepared] or [unknown] * len(members)
        return [self._write(d, batch.transport, started, outcome, rescue=True)
                for d, outcome in zip(members, refused, strict=True)]

    def _not_replayed(self, members: Sequence[Delivery]) -> None:
        for delivery in members:  # the notes of their screening wait for no write
            self.preparation.dropped.pop(delivery.id, None)

    # -- the path -----------------------------------------------------------------

    async def _attempt(self, delivery: Delivery, name: str, now: datetime,
                       message: ComposedMessage | None) -> tuple[Outcome, ComposedMessage | None]:
        """The outcome, and the message when one was composed (its Message-ID goes into the write)."""
        if message is None:
            prepared = self.preparation.message(delivery, now)
            if isinstance(prepared, Outcome):
                return prepared, None
            message = prepared
        transport = self.transports[name]
        left = self._inflight.start_left(delivery, transport.send_timeout_seconds)
        if left <= 0:  # too old already (queued behind slow sends): take no slot
            return Outcome.unstarted(TOO_LATE), message
        held_back = await self.gates[name].admit(len(message.recipients), left)
        if held_back is not None:
            return held_back, message
        if not self._may_start(delivery, transport):  # it waited for the transport's capacity
            return Outcome.unstarted(TOO_LATE), message
        if name != presumed_carrier(self.transport_of(delivery), delivery.pinned_transport):
            held_back = await record_carrier(self._ledger, delivery, name)  # a rescuer must know where it went
            if held_back is not None:
                return held_back, message
        return await transport.send(message, delivery), message

    def _may_start(self, delivery: Delivery, transport: Transport) -> bool:
        """A send must end before its claim could be rescued: start it only inside its start window."""
        return self._inflight.start_left(delivery, transport.send_timeout_seconds) > 0

    def _finish(self, delivery: Delivery, name: str, started: datetime, outcome: Outcome,
                message_id: str | None = None) -> None:
        """Decide, and hand the write to the recorder (never waits: nothing can cancel the hand-over)."""
        self._inflight.send_returned()
        self._recorder.submit(self._write(delivery, name, started, outcome, message_id))

    def _write(self, delivery: Delivery, name: str, started: datetime, outcome: Outcome,
               message_id: str | None = None, *, rescue: bool = False) -> OutcomeWrite:
        finished = self.clock()
        transition = decide(delivery, outcome, finished, self.policy, self._rng.random())
        if transition.scheduled_at is not None and self.routes.moves_on(
                self.transport_of(delivery), delivery.pinned_transport, name, outcome, monotonic()):
            # not taken here, and the claim now routes it to an open fallback: due at once
            log.warning("failover key=%s from %s to %s: %s", delivery.dedupe_key, name, self.route(delivery),
                        outcome.error)
            transition = dataclasses.replace(transition, scheduled_at=finished)
        attempt = AttemptRecord(
            attempt=delivery.attempts,
            started_at=started,
            finished_at=max(finished, started),
            outcome=outcome.kind,
            reply_code=outcome.reply_code,
            enhanced_code=outcome.enhanced_code,
            error=outcome.error if outcome.kind is not OutcomeKind.SENT else transition.last_error,
            transport=name,
            worker=self.worker,
            rescue=rescue,
            refused=outcome.refused + self.preparation.dropped.pop(delivery.id, ()),
            message_id=message_id,
            reply=outcome.reply,
        )
        return OutcomeWrite(delivery, transition, attempt)
