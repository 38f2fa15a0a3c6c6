"""``outbox-mailer run``: wires the daemon's parts and runs their tasks until stopped.

A row's path, and who owns each step::

    claimer.py ──claims a batch, holds it in InFlight──▶ lanes.py: a queue + workers per transport
        ▲  wake: NOTIFY, poll interval, next scheduled_at, retry recorded        │
        │                                                                         ▼
        │            executor.py: compose ─▶ gate.admit ─▶ transport.send ─▶ gate.observe ─▶ decide()
        │                                                                         │ OutcomeWrite
        └──── slot freed (inflight.py) ◀──── recorder.py: fenced batch write ◀────┘
                                              (the claim session unlocks the keys: store/claims.py)
    rescuer (here): every rescue_interval_seconds, settles claims of dead processes

A transport whose server cannot be reached is paused by its circuit breaker
(gate.py): its rows are not claimed until the pause ends, and the attempts
that failed to reach it are refunded and rescheduled for after the pause.
An operator's pause (``outbox-mailer pause``) holds its rows the same way;
pauses.py reads it, and publishes the breakers' pauses, about once a second.

Stopping (SIGTERM/SIGINT or :meth:`Daemon.stop`): the claim loop stops, in-flight
sends get ``shutdown_grace_seconds`` to finish, rows still queued at a lane go
back to pending unattempted, outcomes are written shielded from cancellation,
and closing the claim session releases every lock. A send cut off by the grace
period leaves its row in ``sending``; a rescuer settles it once its claim is
older than the rescue delay. A row cut off before its request started (it
waited for a request slot) goes back to pending untried (executor.py).
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import random
import signal
import socket
from collections.abc import Callable, Mapping
from datetime import datetime

import anyio
from anyio.abc import TaskGroup

from ..clock import monotonic, utc_now
from ..delivery import Transport, batch_transport
from ..errors import ConfigurationError
from ..serving.systemd import SystemdNotifier
from ..settings.config import Settings
from ..store import SessionLimits, Store
from ..store.limits import LimitStore
from ..store.pooler import session_pooling_problem
from ..store.templates import TemplateSources
from .breaker import Breaker
from .claimer import Claimer, DaemonObserver
from .context import DaemonContext
from .executor import Executor
from .gate import TransportGate
from .inflight import InFlight
from .lanes import Lane
from .liveness import Liveness
from .pauses import PauseWatch
from .quotas import Ledger, SharedLimit
from .recorder import Recorder
from .rescuer import Rescuer
from .retention import prune_periodically
from .sessions import DaemonSessions

log = logging.getLogger("outbox_mailer")

GIVE_BACK_SECONDS = 5.0


def default_worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def build_gates(settings: Settings, transports: Mapping[str, Transport], ledger: Ledger) -> dict[str, TransportGate]:
    """A gate per transport, with its shared limits when it has any (quotas.py)."""
    configs = settings.all_transports()
    gates = {}
    for name in transports:
        config = configs.get(name)
        limit = SharedLimit(name, config, ledger) if config is not None and config.limited else None
        gates[name] = TransportGate(name, Breaker(settings.pause_base_seconds, settings.pause_max_seconds), limit)
    return gates


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
        self.worker = settings.worker_name or default_worker_name()
        self.notifier = notifier or SystemdNotifier({})
        self._url = settings.require_database_url()
        self._stopping = anyio.Event()
        self.lanes = {name: Lane(name, t.max_parallel, bt.batch_limit if (bt := batch_transport(t)) else 0)
                      for name, t in self.transports.items()}
        self.inflight = InFlight(settings.concurrency, settings.effective_rescue_after_seconds,
                                 {name: lane.batch_limit for name, lane in self.lanes.items()},
                                 settings.max_message_bytes)
        self.liveness = Liveness(self.notifier, self._status_line, settings.debug_wedge_file)
        self._session_limits = SessionLimits(settings.database_timeout_seconds)
        self._db = DaemonSessions(self._url, on_notify=self.inflight.work_may_be_due, held_keys=self.inflight.keys,
                                  stopping=self._stopping, on_retry=self.liveness.beat, limits=self._session_limits)
        self.recorder = Recorder(self._db, self._stopping, self.inflight,
                                 observer.recorded if observer is not None else None,
                                 suppress_bad_mailboxes=settings.suppression.automatic)
        self._limits = LimitStore(self._url)  # connects only when a transport has a limit
        self.gates = build_gates(settings, self.transports, self._limits)
        self.templates = TemplateSources(self._url, settings.templates.cache_size, self._session_limits)
        self.context = DaemonContext(settings, self.transports, self.gates, self.inflight, self.recorder,
                                     worker=self.worker, default_transport=default_transport, ledger=self._db,
                                     templates=self.templates, clock=clock, rng=rng)
        self.executor = Executor(self.context)
        self.rescuer = Rescuer(self.context, self._db, observer)
        self.pause_watch = PauseWatch(self.gates, self._db, self.worker)
        self.claimer = Claimer(settings, self._db, self.inflight, self.executor, self.gates, self.lanes,
                               self.liveness, self._stopping, observer)

    # ---- lifecycle -------------------------------------------------------------

    def stop(self) -> None:
        """Ask the daemon to drain and exit (idempotent, safe from any task)."""
        self._stopping.set()
        self.inflight.stop()

    @property
    def in_flight(self) -> int:
        return len(self.inflight)

    @property
    def reconnects(self) -> int:
        return self._db.reconnects

    def health(self) -> dict[str, object]:
        """For /healthz and /readyz: is the loop turning, is the database answering, what is paused."""
        now = anyio.current_time()
        beat_every = min(self.settings.poll_interval_seconds, self.liveness.interval)
        return {
            "loop_alive": now - self.liveness.last_turn <= 2 * beat_every + 1,
            "database": now - self.claimer.last_claim_ok <= 2 * self.settings.poll_interval_seconds + 5,
            "paused_transports": sorted(self.context.routes.paused(monotonic())),
            "in_flight": len(self.inflight),
        }

    async def run(self, *, handle_signals: bool = False) -> None:
        await self._check_schema()
        try:
            await self._db.claim_session()
            await self.rescuer.register()
            await self._db.ensure_listening()
            await self.pause_watch.turn()  # no row is claimed for a transport an operator paused
            log.info("started worker=%s concurrency=%d batch=%d", self.worker, self.settings.concurrency,
                     self.settings.batch_size)
            if (guard := self.context.preparation.guard) is not None:
                log.warning("staging guard on: %s", guard.describe())
            self.notifier.ready(self.liveness.status())
            gc.freeze()  # what start-up built lives as long as the daemon: the collector need not scan it again
            async with anyio.create_task_group() as outer:
                if handle_signals:
                    outer.start_soon(self._watch_signals)
                outer.start_soon(self.rescuer.run)
                outer.start_soon(prune_periodically, self._url, self.settings.prune, self._session_limits)
                outer.start_soon(self._db.keep_alive)
                outer.start_soon(self.pause_watch.run, self._stopping)
                async with anyio.create_task_group() as core:
                    core.start_soon(self.recorder.run)
                    async with anyio.create_task_group() as sends:
                        for lane in self.lanes.values():
                            for _ in range(lane.workers):
                                sends.start_soon(lane.serve, functools.partial(self.executor.carry, name=lane.name),
                                                 functools.partial(self.executor.carry_batch, name=lane.name,
                                                                   requests=lane.requests))
                        await self.claimer.run()
                        await self._drain(sends)
                    for lane in self.lanes.values():
                        for delivery in lane.take_queued():
                            self.executor.give_back(delivery)
                    await self.recorder.inbox.aclose()
                outer.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                with anyio.move_on_after(GIVE_BACK_SECONDS):
                    for gate in self.gates.values():
                        if gate.limit is not None:
                            await gate.limit.give_back()  # unused recipients of a daily limit
                await self._limits.close()
                await self.templates.close()
                with anyio.move_on_after(GIVE_BACK_SECONDS):
                    await self.rescuer.forget_me()
            await self._db.close()
            log.info("stopped worker=%s %s", self.worker, " ".join(f"{k}={v}" for k, v in self.recorder.counts.items()))

    async def _check_schema(self) -> None:
        """The schema this version needs, on a connection with a session of its own (store/pooler.py)."""
        problem = await session_pooling_problem(self._url)
        if problem is not None:
            raise ConfigurationError(problem, setting="OUTBOX_MAILER_DATABASE_URL")
        store = await Store.open(self._url, max_size=1)
        try:
            await store.require_schema()
            if rewritten := await store.finish_suppression_forms():
                log.info("rewrote %d suppressions written before schema 20 into the envelope's form", rewritten)
        finally:
            await store.close()

    async def _watch_signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                log.info("received %s: draining", signal.Signals(signum).name)
                self.stop()

    async def _drain(self, sends: TaskGroup) -> None:
        held = len(self.inflight)
        self.notifier.stopping(f"draining {held} in-flight sends")
        if held:
            log.info("waiting up to %gs for %d in-flight sends", self.settings.shutdown_grace_seconds, held)
        with anyio.move_on_after(self.settings.shutdown_grace_seconds):
            while len(self.inflight):
                self.liveness.beat()
                await self.inflight.wait_for_slot(self.liveness.interval)
        if len(self.inflight):
            log.warning("grace period over: cutting off %d sends (requests not started go back untried, the "
                        "others to the rescuer)", len(self.inflight))
        sends.cancel_scope.cancel()

    def _status_line(self, pending: int | None) -> str:
        c = self.recorder.counts
        return (f"sent {c['sent']}, failed {c['failed']}, retried {c['retried']}, in doubt {c['in_doubt']}, "
                f"in flight {len(self.inflight)}, pending {'?' if pending is None else pending}")
