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
rescuer (its request cut off by the shutdown grace period; or a batch whose
answer was ambiguous, given up so that a rescuer resends it whole). A row cut
off before its request started (waiting for a request slot: its transport's
shared rate, its lane's request budget) was never sent: it goes back untried
(:meth:`Executor._cut_off`). Decisions are
``decide()``'s (pure); the only database I/O on the path is the ledger's record
of a fallback or of a batch before its request (``BatchLedger``, context.py).

Batches (a transport with a batch endpoint, :meth:`carry_batch`): each member is
composed on its own; members the transport cannot batch go singly, side by side
with the batch and with each other, every request (the batch call, each single
send) in a slot of the lane's one request budget (lanes.py); the batch is
admitted once (a rate limit counts requests), recorded with its key, sent, and
each member's answer becomes its own outcome. A member whose claim grew too old
to start a send (before or while the batch waited for admission) is left out of
the request and goes back untried: nothing is written or charged for it. A
member the provider did not judge (the batch refused as a whole) is sent singly
at once. An ambiguous answer that a resend under the same key would absorb gives
the whole batch up to the rescuer, which resends the identical batch
(rescuer.py), never its members under other keys.

What the executor shares with the rescuer (the worker, the clock, the transports and their gates,
the routes, the rows in flight, the recorder and the ledger) is one :class:`DaemonContext`
(context.py). Each attempt's route is taken once, at its start (:class:`Route`), and passed along.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

import anyio
from anyio.abc import TaskGroup

from ..delivery import (
    BatchOutcome,
    BatchTransport,
    Cause,
    ComposedMessage,
    Delivery,
    Outcome,
    OutcomeKind,
    SendSingly,
    Transport,
    batch_transport,
)
from ..errors import DatabaseError
from ..providers.seam import batch_idempotency_key
from ..store import AttemptRecord
from .context import DaemonContext, resend_whole
from .email_log import ABANDONED, INTERNAL_ERROR, email_fields
from .failover import Route, record_carrier

log = logging.getLogger("outbox_mailer")

TOO_LATE = "waited too long after the claim to start a send safely"
STOPPED = "the daemon stopped before its request started"


class Executor:
    def __init__(self, ctx: DaemonContext) -> None:
        self.ctx = ctx

    # -- the ways a claimed row ends ---------------------------------------------

    async def carry(self, delivery: Delivery, message: ComposedMessage | None = None, *,
                    name: str | None = None) -> None:
        """Send one row through transport ``name`` (a lane's worker calls this with its own; a batch
        passes a member it composed already) and hand its outcome to the recorder."""
        route = self.ctx.attempt_route(delivery, name)
        started = self.ctx.clock()
        span = None if self.ctx.tracing is None else self.ctx.tracing.attempt(delivery, route.name)
        try:
            outcome, message = await self._attempt(delivery, route, started, message)
        except anyio.get_cancelled_exc_class():
            if self._cut_off([delivery], route.name, started):  # its request started: left for a rescuer
                log.warning("abandoned key=%s attempt=%d: cancelled during the send", delivery.dedupe_key,
                            delivery.attempts, extra=email_fields(delivery.dedupe_key, route.name,
                                                                  delivery.attempts, ABANDONED))
                if span is not None:
                    span.abandon("cancelled during the send")
            elif span is not None:
                span.finish(Outcome.unstarted(STOPPED))
            raise
        except Exception as exc:  # a poison row must not stop the daemon
            log.exception("unexpected error sending key=%s", delivery.dedupe_key,
                          extra=email_fields(delivery.dedupe_key, route.name, delivery.attempts, INTERNAL_ERROR))
            outcome = Outcome.permanent(f"internal error: {type(exc).__name__}: {exc}")
        message_id = message.message_id if message is not None else None
        if span is not None:
            span.finish(outcome, message_id)
        self._finish(delivery, route, started, route.gate.observe(outcome), message_id)

    def refuse_unsendable(self, delivery: Delivery) -> bool:
        """Fail at once, without a network call, a row that cannot be read or names no configured
        transport; True when it did (the row needs no lane)."""
        name = self.ctx.transport_of(delivery)
        if delivery.defect is not None:
            outcome = Outcome.unsendable(f"cannot send this row as stored: {delivery.defect}")
        elif name not in self.ctx.gates:
            known = ", ".join(sorted(self.ctx.transports)) or "none"
            outcome = Outcome.unsendable(f"transport: unknown transport {name!r} (configured: {known})")
        else:
            return False
        self._finish(delivery, name, self.ctx.clock(), outcome)
        return True

    def _cut_off(self, deliveries: Sequence[Delivery], name: str, started: datetime) -> list[Delivery]:
        """The shutdown's grace period ended these rows' attempts (a cancellation); returns the ones left for a
        rescuer. A row still waiting (inflight.py: its request not started; it waited for a request slot, the
        transport's shared rate or its lane's request budget, or was being prepared) was never sent: it goes
        back untried at once (unstarted: pending as it was, not charged, no attempt written). A row whose
        request started may have reached the server: it stays 'sending', no longer ours, for a rescuer."""
        abandoned = []
        for delivery in deliveries:
            if self.ctx.inflight.waiting(delivery):
                self._finish(delivery, name, started, Outcome.unstarted(STOPPED))
            else:
                self.ctx.preparation.dropped.pop(delivery.id, None)
                self.ctx.inflight.abandon(delivery)
                abandoned.append(delivery)
        return abandoned

    def give_back(self, delivery: Delivery) -> None:
        """A row still queued when the sends stopped (waiting for a connection, its lane's request slot) was
        never sent: it goes back untried, as :meth:`_cut_off` gives back a row waiting for its slot."""
        self._finish(delivery, self.ctx.attempt_route(delivery, self.ctx.transport_of(delivery)), self.ctx.clock(),
                     Outcome.unstarted(STOPPED))

    # -- batches ------------------------------------------------------------------

    async def carry_batch(self, deliveries: list[Delivery], name: str | None = None,
                          requests: anyio.CapacityLimiter | None = None) -> None:
        """Send rows queued together on a batching transport's lane (a lane's worker calls this, with
        its transport's ``name``: a row routed there while its own transport was paused may name another,
        and the lane's request budget ``requests``; none: one request at a time). The batch call and each
        row that goes singly are requests side by side, each holding a slot of ``requests`` while it is
        admitted and made."""
        name = name or self.ctx.route(deliveries[0])
        started = self.ctx.clock()
        try:
            await self._carry_group(deliveries, name, requests or anyio.CapacityLimiter(1), started)
        except anyio.get_cancelled_exc_class():
            # rows whose requests never started (being prepared, waiting for a slot, in a later request)
            self._cut_off([d for d in deliveries if self.ctx.inflight.waiting(d)], name, started)
            raise

    async def _carry_group(self, deliveries: list[Delivery], name: str, requests: anyio.CapacityLimiter,
                           started: datetime) -> None:
        """carry_batch's work: each row prepared, the batches formed and sent, the other rows sent singly."""
        transport = batch_transport(self.ctx.transports[name])
        members: list[Delivery] = []
        screened: list[Delivery] = []  # as the request carries them: suppressed recipients left out
        messages: list[ComposedMessage] = []
        singles: list[tuple[Delivery, ComposedMessage]] = []
        for delivery in deliveries:
            prepared = await self.ctx.preparation.screened(delivery, started, name)
            if isinstance(prepared, Outcome):
                self._finish(delivery, self.ctx.attempt_route(delivery, name), started, prepared)
            # after an unknown outcome (the row is pinned) a row goes singly: when that attempt went
            # singly, only its own key lets the provider absorb the repeat
            elif transport is not None and delivery.pinned_transport is None and transport.batchable(
                    prepared[1], delivery):
                members.append(delivery)
                screened.append(prepared[0])
                messages.append(prepared[1])
            else:
                singles.append((delivery, prepared[1]))
        # a request never mixes rows that name a provider's template with rows that do not (Postmark: two endpoints)
        batches: list[list[int]] = []
        for templated in (False, True):
            together = [i for i, d in enumerate(members) if (d.provider_template is not None) is templated]
            if transport is None or len(together) == 1 or not self.ctx.gates[name].fits_one_request(
                    sum(len(messages[i].recipients) for i in together)):
                singles += [(members[i], messages[i]) for i in together]
            elif together:
                batches.append(together)
        async with anyio.create_task_group() as group:
            self._carry_singly(group, singles, name, requests)
            for together in batches:
                assert transport is not None  # a batch was formed only with a batch endpoint
                again = await self._send_batch(name, transport, [members[i] for i in together],
                                               [messages[i] for i in together], started,
                                               [screened[i] for i in together], requests)
                self._carry_singly(group, again, name, requests)

    def _carry_singly(self, group: TaskGroup, singles: list[tuple[Delivery, ComposedMessage]],
                      name: str, requests: anyio.CapacityLimiter) -> None:
        """Start the rows of a batching lane's group that go singly, each a request of its own (counted as
        one from now on, inflight.py)."""
        self.ctx.inflight.go_singly([delivery for delivery, _ in singles])
        for delivery, message in singles:
            group.start_soon(self._carry_in_slot, delivery, message, name, requests)

    async def _carry_in_slot(self, delivery: Delivery, message: ComposedMessage, name: str,
                             requests: anyio.CapacityLimiter) -> None:
        """A batching lane's row that goes singly: one request, in a slot of the lane's budget (cut off by
        the shutdown while waiting for one, it was never attempted: carry_batch gives it back untried)."""
        async with requests:
            await self.carry(delivery, message, name=name)

    async def _send_batch(self, name: str, transport: BatchTransport, members: list[Delivery],
                          messages: list[ComposedMessage], started: datetime, screened: list[Delivery],
                          requests: anyio.CapacityLimiter) -> list[tuple[Delivery, ComposedMessage]]:
        """The batch request, in a slot of ``requests``, and each member's answer; returns the members the
        provider did not judge, to be sent singly."""
        span = None if self.ctx.tracing is None else self.ctx.tracing.batch(members, name)
        try:
            async with requests:
                results = await self._request_batch(name, transport, members, messages, screened)
        except anyio.get_cancelled_exc_class():
            abandoned = self._cut_off(members, name, started)
            if abandoned:
                log.warning("abandoned %d batch members: cancelled during the send", len(abandoned))
            if span is not None and abandoned:
                span.abandon("cancelled during the send")
            elif span is not None:
                span.finish_batch([Outcome.unstarted(STOPPED)] * len(members))
            raise
        except Exception as exc:  # a poison batch must not stop the daemon
            log.exception("unexpected error sending a batch of %d", len(members))
            results = [Outcome.permanent(f"internal error: {type(exc).__name__}: {exc}")] * len(members)
        if span is not None:
            span.finish_batch(results)
        routes = [self.ctx.attempt_route(d, name) for d in members]
        late = {i: r for i, r in enumerate(results) if isinstance(r, Outcome) and r.cause is Cause.UNSTARTED}
        for i, outcome in late.items():  # too old to start: back untried, not in the request
            self._finish(members[i], routes[i], started, outcome)
        going = [i for i in range(len(members)) if i not in late]
        if any(resend_whole(results[i], self.ctx.clock()) for i in going):
            await self._give_up(name, [members[i] for i in going], [messages[i] for i in going],
                                [results[i] for i in going], started)
            return []
        again = []
        for i in going:
            result = results[i]
            if isinstance(result, SendSingly):
                again.append((members[i], messages[i]))
            else:
                self._finish(members[i], routes[i], started, routes[i].gate.observe(result), messages[i].message_id)
        return again

    async def _request_batch(self, name: str, transport: BatchTransport, members: list[Delivery],
                             messages: list[ComposedMessage], screened: list[Delivery]) -> list[BatchOutcome]:
        """Admit once, then record the batch and make its one request; a member too old to start (before
        or after the wait for admission) is not in it: it goes back untried (unstarted)."""
        results: list[BatchOutcome] = [Outcome.unstarted(TOO_LATE)] * len(members)
        left = [self.ctx.inflight.start_left(d, transport.send_timeout_seconds) for d in members]
        going = [i for i, seconds in enumerate(left) if seconds > 0]  # no slot taken for the late
        if not going:
            return results
        held_back = await self.ctx.gates[name].admit(sum(len(messages[i].recipients) for i in going), max(left))
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

    async def _open_and_send(self, name: str, transport: BatchTransport, members: list[Delivery],
                             messages: list[ComposedMessage], screened: list[Delivery]) -> list[BatchOutcome]:
        """Record the batch with its key, each member's recipients as screened and the request's digest,
        then make the one request."""
        key = batch_idempotency_key([d.dedupe_key for d in members])
        digest = transport.batch_digest(messages, screened, key)
        recipients = [(d.to_addresses, d.cc_addresses, d.bcc_addresses) for d in screened]
        ledger = self.ctx.ledger
        try:
            batch_id = await ledger.open_batch(name, key, members, recipients, digest) if ledger is not None else None
        except DatabaseError as exc:
            return [Outcome.held_back(f"could not record the batch before its request: {exc}")] * len(members)
        if batch_id is None:
            return [Outcome.held_back("a member's claim was lost before the batch request")] * len(members)
        self.ctx.inflight.started(members)
        return await transport.send_batch(messages, screened, key)

    async def _give_up(self, name: str, members: list[Delivery], messages: list[ComposedMessage],
                       results: Sequence[BatchOutcome], started: datetime) -> None:
        """An ambiguous answer: each member's attempt is written as ambiguous, the rows stay 'sending'
        and unlocked, so a rescuer resends the identical batch under its recorded key once the rescue
        delay has passed."""
        reason = next(r.error or "" for r in results if isinstance(r, Outcome) and r.cause is Cause.AMBIGUOUS)
        log.warning("batch of %d left for a rescuer to resend under the same key: %s", len(members), reason)
        finished = max(self.ctx.clock(), started)
        attempts = []
        for delivery, message, result in zip(members, messages, results, strict=True):
            outcome = result if isinstance(result, Outcome) else Outcome.ambiguous(reason)
            attempts.append((delivery, AttemptRecord(delivery.attempts, started, finished, OutcomeKind.AMBIGUOUS,
                                                     outcome.reply_code, outcome.enhanced_code, outcome.error, name,
                                                     self.ctx.worker, message_id=message.message_id,
                                                     refused=self.ctx.preparation.dropped.pop(delivery.id, ()))))
            self.ctx.inflight.abandon(delivery)
        if self.ctx.ledger is not None:
            await self.ctx.ledger.give_up(members, attempts)

    # -- the path -----------------------------------------------------------------

    async def _attempt(self, delivery: Delivery, route: Route, now: datetime,
                       message: ComposedMessage | None) -> tuple[Outcome, ComposedMessage | None]:
        """The outcome, and the message when one was composed (its Message-ID goes into the write)."""
        if message is None:
            prepared = await self.ctx.preparation.message(delivery, now, route.name)
            if isinstance(prepared, Outcome):
                return prepared, None
            message = prepared
        transport = self.ctx.transports[route.name]
        left = self.ctx.inflight.start_left(delivery, transport.send_timeout_seconds)
        if left <= 0:  # too old already (queued behind slow sends): take no slot
            return Outcome.unstarted(TOO_LATE), message
        held_back = await route.gate.admit(len(message.recipients), left)
        if held_back is not None:
            return held_back, message
        if not self._may_start(delivery, transport):  # it waited for the transport's capacity
            return Outcome.unstarted(TOO_LATE), message
        if route.recorded_first:  # a rescuer must know where it went
            held_back = await record_carrier(self.ctx.ledger, delivery, route.name)
            if held_back is not None:
                return held_back, message
        self.ctx.inflight.started([delivery])
        return await transport.send(message, delivery), message

    def _may_start(self, delivery: Delivery, transport: Transport) -> bool:
        """A send must end before its claim could be rescued: start it only inside its start window."""
        return self.ctx.inflight.start_left(delivery, transport.send_timeout_seconds) > 0

    def _finish(self, delivery: Delivery, where: Route | str, started: datetime, outcome: Outcome,
                message_id: str | None = None) -> None:
        """Decide, and hand the write to the recorder (never waits: nothing can cancel the hand-over)."""
        self.ctx.inflight.send_returned(delivery)
        self.ctx.recorder.submit(self.ctx.write(delivery, where, started, outcome, message_id))
