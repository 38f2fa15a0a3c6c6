"""What the executor and the rescuer share, built once by the daemon (service.py).

A :class:`DaemonContext` holds the worker's name, the clock and the jitter, the settings and what
follows from them (the retry policy, the routes, the preparation of a row, the Message-ID key), the
transports and their gates, the rows in flight, and the two ports a row's path writes through: the
recorder (:class:`OutcomeSink`) and the claim session's ledger of batches and carriers
(:class:`BatchLedger`). It also makes the one write that records an attempt (:meth:`DaemonContext.write`),
the same for a send and a rescuer's resend. Its ``tracing`` makes each attempt's span when the process
traces (docs/tracing.md); None otherwise.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Protocol

from ..clock import monotonic, utc_now
from ..decide import RetryPolicy, decide
from ..delivery import BatchOutcome, Cause, Delivery, Outcome, OutcomeKind, Transport
from ..providers.registry import SMTP_KIND
from ..settings.config import Settings
from ..settings.transports import ApiTransportSettings
from ..store import AttemptRecord, OutcomeWrite, Recipients
from ..store.templates import TemplateSources
from ..tracing.spans import Tracing, configured
from .email_log import FAILOVER, email_fields
from .failover import CarrierLedger, Route, Routes, held_to
from .gate import TransportGate
from .inflight import InFlight
from .preparation import Preparation

__all__ = ["BatchLedger", "DaemonContext", "OutcomeSink", "resend_whole"]

log = logging.getLogger("outbox_mailer")


class OutcomeSink(Protocol):
    """Where decided writes go (the recorder, recorder.py)."""

    def submit(self, write: OutcomeWrite) -> None:
        """Hand one write over without waiting."""

    async def record(self, batch: Sequence[OutcomeWrite]) -> None:
        """Write these now (a rescue's writes)."""


class BatchLedger(CarrierLedger, Protocol):
    """Where a batch is recorded before its request (the claim session, through DaemonSessions)."""

    async def open_batch(self, transport: str, key: str, members: Sequence[Delivery],
                         recipients: Sequence[Recipients] | None = None, digest: str | None = None) -> int | None:
        """The batch's id; None when a member's claim was lost. Raises DatabaseError."""

    async def give_up(self, members: Sequence[Delivery],
                      attempts: Sequence[tuple[Delivery, AttemptRecord]] = ()) -> None:
        """Write the attempts made, and unlock claims left 'sending' for a rescuer."""


def resend_whole(result: BatchOutcome, now: datetime) -> bool:
    """A batch answer after which only the identical batch, under the same key, may go again."""
    return (isinstance(result, Outcome) and result.cause is Cause.AMBIGUOUS
            and result.resend_safe_until is not None and result.resend_safe_until > now)


class DaemonContext:
    def __init__(
        self,
        settings: Settings,
        transports: Mapping[str, Transport],
        gates: Mapping[str, TransportGate],
        inflight: InFlight,
        recorder: OutcomeSink,
        *,
        worker: str,
        default_transport: str,
        ledger: BatchLedger | None = None,
        templates: TemplateSources | None = None,
        clock: Callable[[], datetime] = utc_now,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self.transports = transports
        self.gates = gates
        self.inflight = inflight
        self.recorder = recorder
        self.worker = worker
        self.default_transport = default_transport
        self.ledger = ledger
        self.clock = clock
        self.rng = rng or random.Random()
        self.policy = RetryPolicy(
            base_seconds=settings.retry.base_seconds,
            max_seconds=settings.retry.max_seconds,
            default_max_attempts=settings.max_attempts,
            in_doubt=settings.in_doubt,
        )
        kinds = {name: config.kind if isinstance(config, ApiTransportSettings) else SMTP_KIND
                 for name, config in settings.all_transports().items()}
        # rendered, screened, guarded, composed; what it left out
        self.preparation = Preparation(settings, templates, kinds)
        self.message_ids = settings.message_id_key()  # what the claim computes Message-IDs with
        self.routes = Routes.of(settings, gates)
        self.tracing: Tracing | None = configured(kinds)

    def transport_of(self, delivery: Delivery) -> str:
        return delivery.transport or self.default_transport

    def route(self, delivery: Delivery) -> str:
        """The transport to carry the row now: its own, or a fallback while its own is paused or held
        off by a long 429; a row with an attempt whose outcome is unknown stays where the latest such
        attempt went, and a row naming a provider's template stays with its own (failover.py)."""
        own = self.transport_of(delivery)
        return self.routes.carrier(own, held_to(delivery, own), monotonic())

    def attempt_route(self, delivery: Delivery, name: str | None = None) -> Route:
        """The route of one attempt, taken at its start: through ``name`` (the lane's transport, where
        the claim routed the row), else where the row would be routed now."""
        own = self.transport_of(delivery)
        return self.routes.attempt(own, held_to(delivery, own), name or self.route(delivery))

    def write(self, delivery: Delivery, where: Route | str, started: datetime, outcome: Outcome,
              message_id: str | None = None, *, rescue: bool = False) -> OutcomeWrite:
        """The decided write of an attempt through ``where`` (a transport's name alone: no failover
        is considered); a retry is due at once when the claim now routes the row elsewhere. ``rescue``:
        written by the rescuer for a claim its holder left."""
        finished = self.clock()
        transition = decide(delivery, outcome, finished, self.policy, self.rng.random())
        name = where.name if isinstance(where, Route) else where
        if transition.scheduled_at is not None and isinstance(where, Route):
            moved = self.routes.moved_to(where, outcome, monotonic())
            if moved is not None:  # not taken here, and the claim now routes it to an open fallback
                log.warning("failover key=%s from %s to %s: %s", delivery.dedupe_key, name, moved, outcome.error,
                            extra=email_fields(delivery.dedupe_key, name, delivery.attempts, FAILOVER))
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
