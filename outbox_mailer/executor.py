"""One claimed row, from its claim to the write that records its outcome.

The row's whole path is here, in the order it happens (the shape of River's
job executor)::

    claimed row ─▶ unreadable or unknown transport? ─────────────────────┐
        │                                                                │
        ▼                                                                ▼
    expired? ─▶ compose ─▶ gate.admit (rate limit, pause) ─▶ claim still young?
        ─▶ transport.send ─▶ gate.observe (breaker) ─▶ decide() ─▶ OutcomeWrite ─▶ recorder

Every way out of a send (sent, refused, unreachable, held back, cancelled at
shutdown, an unexpected exception) ends here in exactly one of two ways: an
:class:`OutcomeWrite` handed to the recorder, or (cut off by the shutdown grace
period) the row left ``sending`` for a rescuer. The executor does no database
I/O; decisions are ``decide()``'s (pure).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping
from datetime import datetime

import anyio

from .clock import utc_now
from .compose import compose
from .config import Settings
from .decide import RetryPolicy, decide
from .delivery import Delivery, Outcome, OutcomeKind, Transport
from .errors import CompositionError
from .gate import TransportGate
from .inflight import InFlight
from .recorder import Recorder
from .store import AttemptRecord, OutcomeWrite
from .transports import resend_safe_until

log = logging.getLogger("outbox_mailer")

DEFAULT_MESSAGE_ID_SECRET = b"outbox-mailer message-id v1"
START_MARGIN_SECONDS = 1.0  # a send must end this long before its claim could be rescued


class Executor:
    def __init__(
        self,
        settings: Settings,
        transports: Mapping[str, Transport],
        gates: Mapping[str, TransportGate],
        inflight: InFlight,
        recorder: Recorder,
        *,
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
        self._rng = rng or random.Random()
        self.policy = RetryPolicy(
            base_seconds=settings.retry.base_seconds,
            max_seconds=settings.retry.max_seconds,
            default_max_attempts=settings.max_attempts,
            in_doubt=settings.in_doubt,
        )
        secret = settings.message_id_secret
        self._message_id_secret = secret.get_secret_value().encode() if secret else DEFAULT_MESSAGE_ID_SECRET

    def transport_of(self, delivery: Delivery) -> str:
        return delivery.transport or self.default_transport

    # -- the ways a claimed row ends ---------------------------------------------

    async def carry(self, delivery: Delivery) -> None:
        """Send one row (a lane's worker calls this) and hand its outcome to the recorder."""
        started = self.clock()
        name = self.transport_of(delivery)
        try:
            outcome = await self._attempt(delivery, name, started)
        except anyio.get_cancelled_exc_class():
            # cut off by the grace period: the row stays 'sending' for the rescuer
            log.warning("abandoned key=%s attempt=%d: cancelled during the send", delivery.dedupe_key,
                        delivery.attempts)
            self._inflight.abandon(delivery)
            raise
        except Exception as exc:  # a poison row must not stop the daemon
            log.exception("unexpected error sending key=%s", delivery.dedupe_key)
            outcome = Outcome.permanent(f"internal error: {type(exc).__name__}: {exc}")
        self._finish(delivery, name, started, self.gates[name].observe(outcome))

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

    def rescued(self, delivery: Delivery, claimed_at: datetime, claimed_by: str) -> OutcomeWrite:
        """The write for a claim whose process died: its outcome is unknown."""
        transport = self.transports.get(self.transport_of(delivery))
        outcome = Outcome.ambiguous(
            f"claimed by {claimed_by} at {claimed_at.isoformat()}; that process stopped before recording "
            "the outcome",
            resend_safe_until=resend_safe_until(delivery, getattr(transport, "idempotency_window_seconds", None)),
        )
        now = self.clock()
        transition = decide(delivery, outcome, now, self.policy, self._rng.random())
        attempt = AttemptRecord(delivery.attempts, claimed_at, max(now, claimed_at), outcome.kind, None, None,
                                outcome.error, self.transport_of(delivery), f"rescuer {self.worker}")
        return OutcomeWrite(delivery, transition, attempt)

    # -- the path -----------------------------------------------------------------

    async def _attempt(self, delivery: Delivery, name: str, now: datetime) -> Outcome:
        if delivery.expires_at is not None and delivery.expires_at <= now:
            return Outcome.unsendable(f"expired at {delivery.expires_at.isoformat()} before it could be sent")
        transport = self.transports[name]
        try:
            message = compose(
                delivery,
                default_from=self.settings.default_from,
                max_message_bytes=self.settings.max_message_bytes,
                message_id_secret=self._message_id_secret,
                now=now,
            )
        except CompositionError as exc:
            return Outcome.unsendable(f"cannot compose: {exc}")
        held_back = await self.gates[name].admit()
        if held_back is not None:
            return held_back
        if not self._may_start(delivery, transport):
            return Outcome.held_back("waited too long after the claim to start a send safely")
        return await transport.send(message, delivery)

    def _may_start(self, delivery: Delivery, transport: Transport) -> bool:
        """A send must end before its claim could be rescued: start it only while
        claim age + send timeout stays under the rescue delay (with a margin)."""
        age = self._inflight.claim_age(delivery)
        if age is None:
            return False
        limit = self.settings.effective_rescue_after_seconds
        return age + transport.send_timeout_seconds + START_MARGIN_SECONDS < limit

    def _finish(self, delivery: Delivery, name: str, started: datetime, outcome: Outcome) -> None:
        """Decide, and hand the write to the recorder (never waits: nothing can cancel the hand-over)."""
        self._inflight.send_returned()
        finished = self.clock()
        transition = decide(delivery, outcome, finished, self.policy, self._rng.random())
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
            refused=outcome.refused,
        )
        self._recorder.submit(OutcomeWrite(delivery, transition, attempt))
