"""The daemon's claiming session: claims, outcome writes, batches recorded before their requests,
and the one rule for releasing advisory locks (:class:`ClaimSession`'s docstring). The values an
outcome write is made of are in ``outcomes.py``; the rescuer's statements, which the session
inherits, in ``rescues.py``; the LISTEN connection in ``listener.py``.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Sequence
from datetime import datetime

import anyio
import asyncpg

from ..delivery import Delivery
from ..message.message_ids import DEFAULT_KEY, MessageIdKey
from .connection import SessionLimits, connect, translate_errors
from .events import adopt_waiting_events, screened
from .outcomes import AttemptRecord, OutcomeWrite, outcome_parameters
from .queries import sql
from .rescues import Recipients, RescueQueries
from .rows import instant_or_none


class ClaimSession(RescueQueries):
    """The daemon's claiming connection: claims, outcome writes and the per-key advisory locks.

    It alone releases the locks, by one rule: **a key is unlocked exactly once,
    after its outcome is committed, and an idle daemon holds no locks.** While
    the claim loop claims, :meth:`record_outcomes` leaves the unlocks to the
    next :meth:`claim_due`, which releases them before it locks anything (one
    round trip fewer per batch; the rows are final or scheduled later by then,
    so a lock held a little longer only keeps what it already kept). When the
    claim loop waits for work it calls :meth:`go_idle`, which releases what was
    left; until the next claim, outcomes are then unlocked right after their
    write. A key this session locked twice (re-entrantly) is unlocked twice.
    One exception, by the same method: a claim the daemon *gives up* to a
    rescuer with no outcome written (a batch whose answer was ambiguous, to be
    resent whole under its recorded key) is unlocked at once, with
    :meth:`release_locks`, so that any daemon's rescuer can take it.
    Closing the session releases every lock it holds.
    """

    def __init__(self, conn: asyncpg.Connection[asyncpg.Record]) -> None:
        self._conn = conn
        self._lock = anyio.Lock()
        self._unlock_later: list[str] = []  # committed outcomes' keys, for the next claim
        self._idle = False  # no claim is coming: unlock right after each write
        self._not_relocked: set[str] = set()  # in-flight keys another session held when relocked
        self.quoted: list[OutcomeWrite] = []  # outcomes written that an unmatched event quotes: adopt_events

    @property
    def deferred_unlocks(self) -> int:
        return len(self._unlock_later)

    @classmethod
    async def open(cls, url: str, *, timeout: float = 10.0, limits: SessionLimits | None = None) -> ClaimSession:
        conn = await connect(url, timeout, limits)
        with translate_errors():
            await conn.execute(sql("claim_session"))  # it keeps email_queue itself; plans made once
        return cls(conn)

    async def close(self) -> None:
        """Closing the session releases every advisory lock it holds."""
        with contextlib.suppress(Exception):
            await self._conn.close(timeout=5)

    def abort(self) -> None:
        """Drop a connection that stopped answering, without waiting for it (its server side ends
        by the server's timeouts, and its locks with it)."""
        self._conn.terminate()

    def is_closed(self) -> bool:
        return self._conn.is_closed()

    async def ping(self, timeout: float) -> None:
        """One round trip, unless a statement is under way (it answers for the connection then)."""
        if self._lock.locked():
            return
        async with self._lock:
            with translate_errors():
                await self._conn.execute("SELECT 1", timeout=timeout)

    async def claim_due(
        self, limit: int, worker: str, *, paused: Sequence[str] = (), default_transport: str = "smtp",
        max_content_bytes: int = 10 * 1024 * 1024, message_ids: MessageIdKey = DEFAULT_KEY,
        max_claim_bytes: int | None = None,
    ) -> list[Delivery]:
        """Claim due rows, writing the Message-ID of each first claimed (message_ids.py); a row
        that cannot be read comes back with ``defect`` set (see rows.py). With ``max_claim_bytes``,
        rows are taken while the content loaded before each comes to less (the first always): the
        claim loads at most that plus one row's ``max_content_bytes``."""
        token = uuid.uuid4()
        async with self._lock:
            self._idle = False
            # on an error the session is closed and its locks go with it: nothing to keep
            unlock, self._unlock_later = self._unlock_later, []
            with translate_errors():
                rows = await self._conn.fetch(sql("claim_due"), limit, token, worker, list(paused), default_transport,
                                              unlock, max_content_bytes, message_ids.inner_pad, message_ids.outer_pad,
                                              message_ids.default_from, message_ids.fallback_domain, max_claim_bytes)
                return await screened(self._conn, rows, max_content_bytes)

    async def go_idle(self) -> int:
        """The claim loop waits for work: release the locks kept for the next claim, and release
        later outcomes' locks right after their write, until the next claim. Returns how many."""
        async with self._lock:
            self._idle = True
            unlock, self._unlock_later = self._unlock_later, []
        return await self.release_locks(unlock)

    async def attempts_recorded(self, writes: Sequence[OutcomeWrite]) -> set[int]:
        """Ids among ``writes`` whose attempt row exists (their outcome was committed before)."""
        if not writes:
            return set()
        async with self._lock:
            with translate_errors():
                rows = await self._conn.fetch(
                    sql("attempts_recorded"), [w.delivery.id for w in writes], [w.attempt.attempt for w in writes],
                    [w.attempt.started_at for w in writes],
                )
        return {r["delivery_id"] for r in rows}

    async def relock(self, keys: Sequence[str]) -> list[str]:
        """Take these keys' advisory locks again (after a reconnect); returns the keys someone else holds."""
        if not keys:
            return []
        async with self._lock:
            with translate_errors():
                taken = [r["dedupe_key"] for r in await self._conn.fetch(sql("relock"), list(keys))]
            self._not_relocked.update(taken)
            return taken

    async def relock_again(self) -> list[str]:
        """Try again the keys :meth:`relock` could not take whose outcome this session has not written
        or released since (a silent session's server side may hold them until the server ends it);
        returns the keys someone still holds."""
        async with self._lock:
            if self._not_relocked:
                with translate_errors():
                    rows = await self._conn.fetch(sql("relock"), sorted(self._not_relocked))
                self._not_relocked = {r["dedupe_key"] for r in rows}
            return sorted(self._not_relocked)

    async def record_outcomes(self, writes: Sequence[OutcomeWrite]) -> set[int]:
        """Apply transitions fenced on the claim; their keys are unlocked by the class's rule.
        Returns the ids whose claim was still ours."""
        if not writes:
            return set()
        args = outcome_parameters(writes)
        async with self._lock:
            with translate_errors():
                rows = await self._conn.fetch(sql("record_outcomes"), *args)
                if any(r["due"] for r in rows):  # the trigger that announced it skips this session
                    await self._conn.execute(sql("wake_claimers"))
            quoted = {r["id"] for r in rows if r["quoted"]}
            self.quoted.extend(w for w in writes if w.delivery.id in quoted)
            self._not_relocked.difference_update(w.delivery.dedupe_key for w in writes)
            idle = self._idle
            if not idle:
                self._unlock_later.extend(w.delivery.dedupe_key for w in writes)
        if idle:
            await self.release_locks([w.delivery.dedupe_key for w in writes])
        return {r["id"] for r in rows}

    async def record_refusals(self, refusals: Sequence[tuple[int, int, str, str, datetime, str]],
                              suppress: bool) -> None:
        """Our own permanent RCPT refusals about the mailbox, as hard bounces (row id, attempt,
        recipient, its normal form, when, reply); ``suppress``: suppress those addresses too."""
        if not refusals:
            return
        columns = [list(c) for c in zip(*refusals, strict=True)]
        async with self._lock:
            with translate_errors():
                await self._conn.execute(sql("record_refusals"), *columns, suppress)

    async def adopt_events(self, automatic: bool) -> int:
        """Match the events that came before the outcomes in :attr:`quoted` (events.py); how many."""
        writes, self.quoted = self.quoted, []
        async with self._lock:
            with translate_errors():
                return await adopt_waiting_events(self._conn, [
                    (w.delivery.id, w.transition.provider_message_id, w.attempt.message_id) for w in writes], automatic)

    async def release_locks(self, keys: Sequence[str]) -> int:
        """Unlock these keys once each (their outcomes are committed); returns how many were held."""
        if not keys:
            return 0
        async with self._lock:
            self._not_relocked.difference_update(keys)
            with translate_errors():
                return int(await self._conn.fetchval(sql("release_locks"), list(keys)))

    async def count_pending(self) -> int:
        async with self._lock:
            with translate_errors():
                return int(await self._conn.fetchval(sql("count_pending")))

    async def next_due_at(self) -> datetime | None:
        async with self._lock:
            with translate_errors():
                seconds = await self._conn.fetchval(sql("next_due_at"))
        return instant_or_none(seconds)

    async def record_carrier(self, delivery: Delivery, transport: str) -> bool:
        """Before a send through ``transport``, not the row's own: record it for a rescuer (it is
        read back with the dead claim). False when the claim was lost meanwhile (then it must not be sent)."""
        async with self._lock:
            with translate_errors():
                row = await self._conn.fetchrow(sql("record_carrier"), delivery.id, delivery.claim_token, transport)
        return row is not None

    # -- batch sends: recorded before the request, so a rescuer can resend the identical batch ------

    async def open_batch(self, transport: str, key: str, members: Sequence[Delivery],
                         recipients: Sequence[Recipients] | None = None, digest: str | None = None) -> int | None:
        """Record a batch (members in request order, each with the recipients its request carries, and
        the request's digest) before its request; None when a member's claim was lost meanwhile (then
        the batch must not be sent)."""
        sent_to = json.dumps([[list(field) for field in r] for r in recipients]) if recipients is not None else None
        async with self._lock:
            with translate_errors():
                row = await self._conn.fetchrow(sql("open_batch"), transport, key, [d.id for d in members],
                                                [d.claim_token for d in members], sent_to, digest)
        if row is None or row["members"] != len(members):  # (the statement always returns one row)
            return None
        return int(row["id"])

    async def record_attempts(self, attempts: Sequence[tuple[Delivery, AttemptRecord]]) -> None:
        """Write attempts without changing their rows (a batch given up to a rescuer)."""
        if not attempts:
            return
        a = [x for _, x in attempts]
        async with self._lock:
            with translate_errors():
                await self._conn.execute(
                    sql("record_attempts"), [d.id for d, _ in attempts], [x.attempt for x in a],
                    [x.started_at for x in a], [x.finished_at for x in a], [x.outcome.value for x in a],
                    [x.reply_code for x in a], [x.enhanced_code for x in a], [x.error for x in a],
                    [x.transport for x in a], [x.worker_label for x in a], [x.message_id for x in a])
