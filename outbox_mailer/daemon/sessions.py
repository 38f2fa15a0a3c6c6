"""The daemon's database sessions, kept alive across outages.

* the claim session (claims, outcomes, advisory locks), reopened with backoff
  when the connection is lost; after a reopen, the advisory locks of the rows
  still in flight are taken again, so a restarted PostgreSQL does not leave
  them unguarded (a key someone else took meanwhile is logged; its outcome
  write will then find the claim gone, which is logged and counted too);
* the LISTEN session, reopened on the next claim after it was lost (the
  poll interval covers the gap); transport pauses are read and published on
  it too (pauses.py), one statement at a time with its heartbeat;
* both pinged while idle (:meth:`DaemonSessions.keep_alive`), so that one
  which went silent, its TCP connection open but nothing answering, is
  noticed within a bounded time and replaced (docs/production-postgres.md).
  Each session has a heartbeat task of its own: reopening a lost LISTEN
  session may take a connect timeout per silent host, and meanwhile the
  claim session must still be pinged before the server's
  idle_session_timeout ends it. The silent session's server side lives on
  until that timeout ends it, holding its advisory locks, so the keys a
  reconnect could not take again are tried at every ping until they are.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime

import anyio

from ..delivery import Delivery
from ..errors import DatabaseBusy, DatabaseError, DatabaseUnavailable
from ..store import AttemptRecord, ClaimSession, Listener, Recipients, SessionLimits
from ..store.connection import settled
from ..store.pauses import PauseState

log = logging.getLogger("outbox_mailer")

RECONNECT_FIRST_SECONDS = 0.1
RECONNECT_MAX_SECONDS = 2.0  # resume within a few seconds of the database coming back


class DaemonSessions:
    def __init__(
        self,
        url: str,
        *,
        on_notify: Callable[[], None],
        held_keys: Callable[[], Sequence[str]],
        stopping: anyio.Event,
        on_retry: Callable[[], None] = lambda: None,
        limits: SessionLimits | None = None,
    ) -> None:
        self._url = url
        self._limits = limits or SessionLimits()
        self._on_notify = on_notify
        self._held_keys = held_keys
        self._stopping = stopping
        self._on_retry = on_retry  # each reconnect try: the daemon is busy recovering, not wedged
        self._claim: ClaimSession | None = None
        self._listener: Listener | None = None
        self._lock = anyio.Lock()
        self._listen_lock = anyio.Lock()
        self._listener_busy = anyio.Lock()  # one statement at a time on the LISTEN session
        self._opened_before = False
        self._idle = False  # the claim loop waits for work (see ClaimSession's lock rule)
        self.reconnects = 0

    @property
    def connected(self) -> bool:
        """The claim session is open (nothing waits for a reconnect)."""
        return self._claim is not None and not self._claim.is_closed()

    async def claim_session(self) -> ClaimSession:
        """The claim session; reconnects with backoff. Raises DatabaseUnavailable once stopping."""
        async with self._lock:
            delay = RECONNECT_FIRST_SECONDS
            while self._claim is None or self._claim.is_closed():
                try:
                    session = await ClaimSession.open(self._url, limits=self._limits)
                except DatabaseError as exc:
                    if self._stopping.is_set():
                        raise DatabaseUnavailable(f"stopping while the database is unavailable: {exc}") from exc
                    log.warning("database unavailable (%s); retrying in %.1fs", exc, delay)
                    self._on_retry()
                    await anyio.sleep(delay)
                    delay = min(delay * 2, RECONNECT_MAX_SECONDS)
                    continue
                if self._opened_before:
                    self.reconnects += 1
                    log.info("database connection re-established")
                    await self._relock(session)
                if self._idle:
                    await session.go_idle()
                self._claim, self._opened_before = session, True
            return self._claim

    async def _relock(self, session: ClaimSession) -> None:
        keys = list(self._held_keys())
        if not keys:
            return
        taken = await session.relock(keys)
        for key in taken:
            log.warning("lock lost key=%s: another session holds it since the reconnect", key)
        log.info("re-took %d of %d in-flight advisory locks", len(keys) - len(taken), len(keys))

    async def keep_alive(self) -> None:
        """Runs until cancelled: a heartbeat task per session, each every ``SessionLimits.heartbeat``
        (a third of DATABASE_TIMEOUT_SECONDS), so that neither session's reopening delays the other's
        ping past the server's idle_session_timeout."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._keep_claim_session_alive)
            tg.start_soon(self._keep_listening)

    async def _keep_claim_session_alive(self) -> None:
        """Ping the claim session while idle (a failed ping drops it; the next use reconnects) and try
        again the locks a reconnect could not take."""
        beat = self._limits.heartbeat
        while not self._stopping.is_set():
            await anyio.sleep(beat)
            claim = self._claim
            if claim is None or claim.is_closed():
                continue
            try:
                await settled(claim.ping(beat))
                await settled(claim.relock_again())
            except DatabaseError as exc:
                await self.failed(exc, claim)

    async def _keep_listening(self) -> None:
        """Ping the LISTEN session (a failed ping drops it) and reopen it when it is lost."""
        beat = self._limits.heartbeat
        while not self._stopping.is_set():
            await anyio.sleep(beat)
            listener = self._listener
            if listener is not None and not listener.is_closed():
                try:
                    async with self._listener_busy:
                        await settled(listener.ping(beat))
                except DatabaseError as exc:
                    log.warning("LISTEN session lost (%s); reopening", exc)
                    listener.abort()
            await self.ensure_listening()

    @contextlib.asynccontextmanager
    async def idle(self) -> AsyncIterator[None]:
        """While the claim loop waits for work: no claim is coming to carry the unlocks, so the
        claim session releases them now and after each later write (across a reconnect too)."""
        self._idle = True
        await self._release_committed(reconnect=True)
        try:
            yield
        finally:
            self._idle = False

    async def stop_claiming(self) -> None:
        """The claim loop ended: from now on every outcome is unlocked right after its write."""
        self._idle = True
        await self._release_committed(reconnect=False)

    async def _release_committed(self, *, reconnect: bool) -> None:
        try:
            if reconnect or (self._claim is not None and not self._claim.is_closed()):
                await (await self.claim_session()).go_idle()
        except DatabaseError as exc:
            await self.failed(exc)  # closing the session releases every lock it held

    async def open_batch(self, transport: str, key: str, members: Sequence[Delivery],
                         recipients: Sequence[Recipients] | None = None, digest: str | None = None) -> int | None:
        """Record a batch before its request (see ClaimSession.open_batch); a database error is raised."""
        try:
            return await (await self.claim_session()).open_batch(transport, key, members, recipients, digest)
        except DatabaseError as exc:
            await self.failed(exc)
            raise

    async def record_carrier(self, delivery: Delivery, transport: str) -> bool:
        """Record the fallback a claim is sent through, before the send (see ClaimSession.record_carrier);
        a database error is raised."""
        try:
            return await (await self.claim_session()).record_carrier(delivery, transport)
        except DatabaseError as exc:
            await self.failed(exc)
            raise

    async def give_up(self, members: Sequence[Delivery],
                      attempts: Sequence[tuple[Delivery, AttemptRecord]] = ()) -> None:
        """Claims given up to a rescuer (rows left 'sending', no outcome written): write the attempts
        that were made, then unlock the rows."""
        try:
            session = await self.claim_session()
            await session.record_attempts(attempts)
            await session.release_locks([d.dedupe_key for d in members])
        except DatabaseError as exc:
            await self.failed(exc)  # closing the session released them

    async def failed(self, exc: Exception, session: ClaimSession | None = None, *, locking: bool = False) -> None:
        """A statement on the claim session (``session``: that one, if it is still the current one)
        failed: drop it (its locks go with it); the next use reconnects. A busy database keeps it,
        unless the statement was ``locking`` (a session lock it took before it was stopped stays)."""
        log.warning("database error: %s", exc)
        if isinstance(exc, DatabaseBusy) and not locking:
            pass
        elif self._claim is not None and (session is None or session is self._claim):
            if isinstance(exc, DatabaseUnavailable):  # lost or silent: a goodbye would wait for nothing
                self._claim.abort()
            else:
                await self._claim.close()
        await anyio.sleep(0.2)

    async def ensure_listening(self) -> None:
        """Open the LISTEN session if there is none (the claimer and the heartbeat both ask: one opens)."""
        async with self._listen_lock:
            if self._listener is not None and not self._listener.is_closed():
                return
            lost = self._listener is not None
            try:
                self._listener = await Listener.open(self._url, self._on_notify, limits=self._limits)
            except DatabaseError as exc:
                log.warning("LISTEN failed (%s); relying on polling until it works", exc)
                return
        if lost:  # what was notified while nobody listened is found by a claim now, not at the next poll
            self._on_notify()

    async def pauses(self, transports: Sequence[str]) -> list[PauseState]:
        """Each transport's operator pause and latest resume, read on the LISTEN session (pauses.py)."""
        listener = self._listening()
        async with self._listener_busy:
            return await listener.pauses(transports)

    async def publish_breaker_pause(self, transport: str, paused_by: str, reason: str, seconds: float) -> datetime:
        """Publish a circuit breaker's pause on the LISTEN session; the database's time of it."""
        listener = self._listening()
        async with self._listener_busy:
            return await listener.publish_breaker_pause(transport, paused_by, reason, seconds)

    def _listening(self) -> Listener:
        if self._listener is None or self._listener.is_closed():
            raise DatabaseUnavailable("no LISTEN session (it is reopened by the heartbeat)")
        return self._listener

    async def close(self) -> None:
        """Close both sessions; closing the claim session releases every advisory lock it holds."""
        with anyio.CancelScope(shield=True):
            for session in (self._listener, self._claim):
                if session is not None:
                    await session.close()
            self._listener = self._claim = None
