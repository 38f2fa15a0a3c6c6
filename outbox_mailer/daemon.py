"""``outbox-mailer run``: claim, send, record, retry.

Tasks inside one anyio task group::

    claim loop ──claims a batch──▶ transport gates: queue + max_parallel workers ──outcome──▶ recorder
        ▲  wake: NOTIFY, poll interval, next scheduled_at                              │
        └──────────────────── slot freed ◀─────── locks released ◀─────────────────────┘
    rescuer: every rescue_interval_seconds, settles claims of dead processes

Each transport's workers are started once and live as long as the daemon: a
claimed row costs a queue entry, not a task (see gate.py).

A transport whose server cannot be reached is paused by its circuit breaker:
its rows are not claimed until the pause ends, and the attempts that failed
to reach it are refunded and rescheduled for after the pause.

Stopping (SIGTERM/SIGINT or :meth:`Daemon.stop`): the claim loop stops, in-flight
sends get ``shutdown_grace_seconds`` to finish, their outcomes are written
shielded from cancellation, and closing the claim session releases every lock.
A send cut off by the grace period leaves its row in ``sending``; a rescuer
settles it once its claim is older than the rescue delay.
"""

from __future__ import annotations

import logging
import math
import os
import random
import signal
import socket
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Protocol

import anyio
from anyio.abc import TaskGroup

from .breaker import Breaker
from .compose import compose
from .config import Settings
from .decide import RetryPolicy, decide
from .delivery import Delivery, Outcome, OutcomeKind, Status, Transport
from .errors import CompositionError, DatabaseError, SchemaMismatch
from .gate import TransportGate
from .liveness import Liveness
from .migrations import expected_schema_version
from .ratelimit import TokenBucket
from .recorder import Recorder
from .retention import prune_periodically
from .sessions import DaemonSessions
from .store import AttemptRecord, ClaimSession, OutcomeWrite, Store
from .systemd import SystemdNotifier

log = logging.getLogger("outbox_mailer")

DEFAULT_MESSAGE_ID_SECRET = b"outbox-mailer message-id v1"
RESCUE_BATCH = 100
DUE_BUT_UNCLAIMABLE_RECHECK_SECONDS = 0.1
IDEMPOTENCY_WINDOW_SHARE = 0.9  # trust a provider's key window only up to 90% of its stated length


def utc_now() -> datetime:
    return datetime.now(UTC)


def default_worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def build_gates(settings: Settings, transports: Mapping[str, Transport]) -> dict[str, TransportGate]:
    configs = settings.all_transports()
    gates = {}
    for name, transport in transports.items():
        config = configs.get(name)
        rate = getattr(config, "effective_rate_per_second", None) or getattr(config, "rate_per_second", None)
        limiter = TokenBucket(rate, config.burst) if config is not None and rate else None
        breaker = Breaker(settings.pause_base_seconds, settings.pause_max_seconds)
        gates[name] = TransportGate(name, transport, breaker, limiter)
    return gates


class DaemonObserver(Protocol):
    """What the daemon reports as it works (metrics)."""

    def claimed(self, batch_size: int) -> None: ...

    def recorded(self, write: OutcomeWrite, applied: bool) -> None: ...


class Daemon:
    def __init__(
        self,
        settings: Settings,
        transports: Mapping[str, Transport],
        *,
        default_transport: str = "smtp",
        clock: Callable[[], datetime] = utc_now,
        rng: random.Random | None = None,
        notifier: SystemdNotifier | None = None,
        observer: DaemonObserver | None = None,
    ) -> None:
        self.settings = settings
        self.transports = dict(transports)
        self.default_transport = default_transport
        self.clock = clock
        self.rng = rng or random.Random()
        self.worker = settings.worker_name or default_worker_name()
        self.policy = RetryPolicy(
            base_seconds=settings.retry.base_seconds,
            max_seconds=settings.retry.max_seconds,
            default_max_attempts=settings.max_attempts,
            in_doubt=settings.in_doubt,
        )
        secret = settings.message_id_secret
        self.message_id_secret = secret.get_secret_value().encode() if secret else DEFAULT_MESSAGE_ID_SECRET
        self.gates = build_gates(settings, self.transports)
        self.notifier = notifier or SystemdNotifier({})
        self.liveness = Liveness(self.notifier, self._status_line, settings.debug_wedge_file)
        self._last_claim_ok = -math.inf
        self._url = settings.require_database_url()
        self._stopping = anyio.Event()
        self._wake = anyio.Event()
        # in-flight row id -> (dedupe key, monotonic time of the claim); their advisory locks are ours
        self._held: dict[int, tuple[str, float]] = {}
        self._sending = 0  # claimed rows whose send has not returned yet (the concurrency budget)
        self._slot_freed = anyio.Event()
        self._db = DaemonSessions(
            self._url, on_notify=self._wake_up, held_keys=lambda: [k for k, _ in self._held.values()],
            stopping=self._stopping, on_retry=lambda: self.liveness.beat(),
        )
        self.observer = observer
        # the claim loop is about to claim again: outcome writes leave their unlocks to that claim
        self._claiming = False
        self.recorder = Recorder(self._db, self._stopping, self._recorded,
                                 observer.recorded if observer is not None else None,
                                 defer_release=lambda: self._claiming and not self._stopping.is_set())

    # ---- lifecycle -------------------------------------------------------------

    def stop(self) -> None:
        """Ask the daemon to drain and exit (idempotent, safe from any task)."""
        self._stopping.set()
        self._wake.set()
        self._slot_freed.set()  # the claim loop may be waiting for a free slot

    @property
    def in_flight(self) -> int:
        return len(self._held)

    @property
    def reconnects(self) -> int:
        return self._db.reconnects

    def health(self) -> dict[str, object]:
        """For /healthz and /readyz: is the loop turning, is the database answering, what is paused."""
        now = anyio.current_time()
        beat_every = min(self.settings.poll_interval_seconds, self.liveness.interval)
        return {
            "loop_alive": now - self.liveness.last_turn <= 2 * beat_every + 1,
            "database": now - self._last_claim_ok <= 2 * self.settings.poll_interval_seconds + 5,
            "paused_transports": sorted(self._paused()),
            "in_flight": len(self._held),
        }

    async def run(self, *, handle_signals: bool = False) -> None:
        await self._check_schema()
        try:
            await self._db.claim_session()
            await self._db.ensure_listening()
            log.info("started worker=%s concurrency=%d batch=%d", self.worker, self.settings.concurrency,
                     self.settings.batch_size)
            self.notifier.ready(self.liveness.status())
            async with anyio.create_task_group() as outer:
                if handle_signals:
                    outer.start_soon(self._watch_signals)
                outer.start_soon(self._rescue_loop)
                outer.start_soon(prune_periodically, self._url, self.settings.prune)
                async with anyio.create_task_group() as core:
                    core.start_soon(self.recorder.run)
                    async with anyio.create_task_group() as sends:
                        for gate in self.gates.values():
                            for _ in range(gate.workers):
                                sends.start_soon(gate.serve, self._send_one)
                        await self._claim_loop()
                        await self._drain(sends)
                    self._never_started()
                    await self.recorder.inbox.aclose()
                outer.cancel_scope.cancel()
        finally:
            await self._db.close()
            log.info("stopped worker=%s %s", self.worker, " ".join(f"{k}={v}" for k, v in self.recorder.counts.items()))

    async def _check_schema(self) -> None:
        store = await Store.open(self._url, max_size=1)
        try:
            version = await store.schema_version()
        finally:
            await store.close()
        expected = expected_schema_version()
        if version != expected:
            raise SchemaMismatch(
                f"database schema is at version {version or 'none'}, this outbox-mailer needs {expected}: "
                "run `outbox-mailer migrate`"
            )

    async def _watch_signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                log.info("received %s: draining", signal.Signals(signum).name)
                self.stop()

    async def _drain(self, sends: TaskGroup) -> None:
        self.notifier.stopping(f"draining {len(self._held)} in-flight sends")
        if self._held:
            log.info("waiting up to %gs for %d in-flight sends", self.settings.shutdown_grace_seconds, len(self._held))
        with anyio.move_on_after(self.settings.shutdown_grace_seconds):
            while self._held:
                self.liveness.beat()
                with anyio.move_on_after(self.liveness.interval):
                    await self._wait_slot()
        if self._held:
            log.warning("grace period over: abandoning %d sends to the rescuer", len(self._held))
        sends.cancel_scope.cancel()

    def _never_started(self) -> None:
        """Rows still queued at a gate when the sends stopped were never attempted: give them back."""
        for gate in self.gates.values():
            for delivery in gate.take_queued():
                self._finish(delivery, gate.name, self.clock(), Outcome.held_back(
                    "not started before shutdown"))

    def _wake_up(self) -> None:
        self._wake.set()

    # ---- claiming --------------------------------------------------------------

    def _gate_capacity(self) -> int:
        """Sends the open transports could start right now: claim no more, so claimed rows do not
        queue at a gate (a queued row's claim ages; see _may_start)."""
        if not self.gates:
            return self.settings.concurrency  # nothing to gate (every row fails as an unknown transport)
        now = anyio.current_time()
        return sum(g.room for g in self.gates.values() if not g.is_paused(now))

    def _until_next_unpause(self) -> float:
        now = anyio.current_time()
        paused = [g.breaker.remaining(now) for g in self.gates.values() if g.is_paused(now)]
        return min(paused) if paused else math.inf

    def _paused(self) -> list[str]:
        now = anyio.current_time()
        return [name for name, gate in self.gates.items() if gate.is_paused(now)]

    async def _claim_loop(self) -> None:
        self._claiming = True
        try:
            await self._claim_until_stopped()
        finally:
            self._claiming = False
        await self._release_deferred()

    async def _release_deferred(self) -> None:
        """Before waiting for work: release the locks the recorder left for the next claim."""
        try:
            await (await self._db.claim_session()).release_deferred()
        except DatabaseError as exc:
            if not self._stopping.is_set():
                await self._db.failed(exc)  # closing the session releases every lock it held

    async def _claim_until_stopped(self) -> None:
        while not self._stopping.is_set():
            await self.liveness.beat_or_wedge()
            # a send frees its slot when it returns; its outcome may still wait for the recorder
            # (bounded: at most another `concurrency` rows awaiting their write)
            free = min(self.settings.concurrency - self._sending, 2 * self.settings.concurrency - len(self._held),
                       self._gate_capacity())
            if free <= 0:  # every slot busy, or every transport with room is paused
                limit = min(self._until_next_unpause(), self.settings.poll_interval_seconds,
                            self.liveness.interval)
                self._claiming = not self._paused()  # busy slots: a claim follows the next freed one
                if not self._claiming:
                    await self._release_deferred()
                with anyio.move_on_after(limit):
                    await self._wait_slot()
                self._claiming = True
                continue
            self._wake = anyio.Event()  # before claiming, so a NOTIFY during the claim is not lost
            want = min(self.settings.batch_size, free)
            try:
                session = await self._db.claim_session()
                batch = await session.claim_due(want, self.worker, paused=self._paused(),
                                                default_transport=self.default_transport,
                                                max_content_bytes=self.settings.max_message_bytes)
                await self._db.ensure_listening()
            except DatabaseError as exc:
                if not self._stopping.is_set():
                    await self._db.failed(exc)
                continue
            claimed = anyio.current_time()
            self._last_claim_ok = claimed
            if self.observer is not None:
                self.observer.claimed(len(batch))
            for delivery in batch:
                self._held[delivery.id] = (delivery.dedupe_key, claimed)
                self._sending += 1
                name = delivery.transport or self.default_transport
                gate = self.gates.get(name)
                if delivery.defect is not None:  # failed alone, without a network call
                    self._finish(delivery, name, self.clock(), Outcome.unsendable(
                        f"cannot send this row as stored: {delivery.defect}"))
                elif gate is not None:
                    gate.submit(delivery)
                else:
                    known = ", ".join(sorted(self.transports)) or "none"
                    self._finish(delivery, name, self.clock(), Outcome.unsendable(
                        f"transport: unknown transport {name!r} (configured: {known})"))
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
            until_due = (next_due - self.clock()).total_seconds()
            now = anyio.current_time()
            pauses = [g.breaker.remaining(now) for g in self.gates.values() if g.is_paused(now)]
            if until_due > 0:
                timeout = min(timeout, until_due)
            elif pauses:
                timeout = min(timeout, min(pauses))  # due rows wait for their transport
            else:
                timeout = min(timeout, DUE_BUT_UNCLAIMABLE_RECHECK_SECONDS)  # their keys are locked elsewhere
        timeout = min(timeout, self.liveness.interval)
        self._claiming = False
        try:
            await self._release_deferred()
            with anyio.move_on_after(timeout):
                await self._wake.wait()
        finally:
            self._claiming = True
        await self.liveness.refresh_pending(session)

    def _status_line(self, pending: int | None) -> str:
        c = self.recorder.counts
        return (f"sent {c['sent']}, failed {c['failed']}, retried {c['retried']}, in doubt {c['in_doubt']}, "
                f"in flight {len(self._held)}, pending {'?' if pending is None else pending}")

    async def _wait_slot(self) -> None:
        self._slot_freed = anyio.Event()
        await self._slot_freed.wait()

    def _sent_returned(self) -> None:
        self._sending -= 1
        self._slot_freed.set()

    def _release_slot(self, delivery: Delivery) -> None:
        self._held.pop(delivery.id, None)
        self._slot_freed.set()

    # ---- sending ---------------------------------------------------------------

    async def _send_one(self, delivery: Delivery) -> None:
        started = self.clock()
        transport_name = delivery.transport or self.default_transport
        try:
            outcome = await self._attempt(delivery, transport_name, started)
        except anyio.get_cancelled_exc_class():
            # cut off by the grace period: the row stays 'sending' for the rescuer
            log.warning("abandoned key=%s attempt=%d: cancelled during the send", delivery.dedupe_key,
                        delivery.attempts)
            self._sent_returned()
            self._release_slot(delivery)
            raise
        except Exception as exc:  # a poison row must not stop the daemon
            log.exception("unexpected error sending key=%s", delivery.dedupe_key)
            outcome = Outcome.permanent(f"internal error: {type(exc).__name__}: {exc}")
        self._finish(delivery, transport_name, started, self.gates[transport_name].observe(outcome))

    def _finish(self, delivery: Delivery, transport_name: str, started: datetime, outcome: Outcome) -> None:
        """The send returned (or never could start): decide, and hand the outcome to the recorder."""
        self._sent_returned()
        finished = self.clock()
        transition = decide(delivery, outcome, finished, self.policy, self.rng.random())
        attempt = AttemptRecord(
            attempt=delivery.attempts,
            started_at=started,
            finished_at=max(finished, started),
            outcome=outcome.kind,
            reply_code=outcome.reply_code,
            enhanced_code=outcome.enhanced_code,
            error=outcome.error if outcome.kind is not OutcomeKind.SENT else transition.last_error,
            transport=transport_name,
            worker=self.worker,
            refused=outcome.refused,
        )
        # the inbox is unbounded (at most one outcome per row in flight): send_nowait never waits,
        # so nothing can cancel the hand-over between the send and the recorder
        self.recorder.inbox.send_nowait(OutcomeWrite(delivery, transition, attempt))

    async def _attempt(self, delivery: Delivery, transport_name: str, now: datetime) -> Outcome:
        if delivery.expires_at is not None and delivery.expires_at <= now:
            return Outcome.unsendable(f"expired at {delivery.expires_at.isoformat()} before it could be sent")
        transport = self.transports[transport_name]
        try:
            message = compose(
                delivery,
                default_from=self.settings.default_from,
                max_message_bytes=self.settings.max_message_bytes,
                message_id_secret=self.message_id_secret,
                now=now,
            )
        except CompositionError as exc:
            return Outcome.unsendable(f"cannot compose: {exc}")
        return await self.gates[transport_name].send(message, delivery, lambda: self._may_start(delivery, transport))

    def _may_start(self, delivery: Delivery, transport: Transport) -> bool:
        """A send must end before its claim could be rescued: start it only while
        claim age + send timeout stays under the rescue delay (with a margin)."""
        held = self._held.get(delivery.id)
        if held is None:
            return False
        age = anyio.current_time() - held[1]
        return age + transport.send_timeout_seconds + 1.0 < self.settings.effective_rescue_after_seconds

    def _recorded(self, batch: Sequence[OutcomeWrite]) -> None:
        for write in batch:
            self._release_slot(write.delivery)
        if any(w.transition.status is Status.PENDING for w in batch):
            self._wake.set()  # a retry may be due before the claim loop's current wait ends

    # ---- rescue ----------------------------------------------------------------

    async def _rescue_loop(self) -> None:
        while True:
            await anyio.sleep(self.settings.rescue_interval_seconds)
            try:
                await self.rescue_once()
            except DatabaseError as exc:
                log.warning("rescue skipped: %s", exc)

    def _resend_safe_until(self, delivery: Delivery) -> datetime | None:
        transport = self.transports.get(delivery.transport or self.default_transport)
        window = getattr(transport, "idempotency_window_seconds", None)
        if not window or delivery.first_attempt_at is None:
            return None
        return delivery.first_attempt_at + timedelta(seconds=window * IDEMPOTENCY_WINDOW_SHARE)

    async def rescue_once(self) -> int:
        """Settle claims of dead processes by the ambiguous-outcome policy; returns how many."""
        session = await self._db.claim_session()
        dead = await session.find_dead_claims(self.settings.effective_rescue_after_seconds, RESCUE_BATCH,
                                              own=list(self._held), max_content_bytes=self.settings.max_message_bytes)
        writes = []
        now = self.clock()
        for delivery, claimed_at, claimed_by in dead:
            outcome = Outcome.ambiguous(
                f"claimed by {claimed_by} at {claimed_at.isoformat()}; that process stopped before recording "
                "the outcome",
                resend_safe_until=self._resend_safe_until(delivery),
            )
            transition = decide(delivery, outcome, now, self.policy, self.rng.random())
            attempt = AttemptRecord(delivery.attempts, claimed_at, max(now, claimed_at), outcome.kind, None, None,
                                    outcome.error, delivery.transport or self.default_transport,
                                    f"rescuer {self.worker}")
            writes.append(OutcomeWrite(delivery, transition, attempt))
        if writes:
            log.warning("rescuing %d claims of stopped processes (policy %s)", len(writes), self.settings.in_doubt)
            with anyio.CancelScope(shield=True):
                await self.recorder.record(writes)
        return len(writes)
