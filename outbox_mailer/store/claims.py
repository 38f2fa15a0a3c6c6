"""The daemon's sessions: claiming (with its advisory locks) and LISTEN."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import anyio
import asyncpg

from ..decide import Transition
from ..delivery import Delivery, OutcomeKind, RefusedRecipient
from ..message.message_ids import DEFAULT_KEY, MessageIdKey
from .connection import CHANNEL, SessionLimits, connect, translate_errors
from .events import adopt_waiting_events, screened
from .processes import ProcessIdentity
from .queries import sql
from .rows import instant_or_none


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One attempt, as written to email_delivery_attempts."""

    attempt: int
    started_at: datetime
    finished_at: datetime
    outcome: OutcomeKind
    reply_code: int | None
    enhanced_code: str | None
    error: str | None
    transport: str
    worker: str
    refused: tuple[RefusedRecipient, ...] = ()  # every recipient not reached, kept whole (no clipping)
    message_id: str | None = None  # the Message-ID composed for it (None: nothing composed)
    reply: str | None = None  # the server's whole final reply (provider_message_id is the id in it)


@dataclass(frozen=True, slots=True)
class DeadClaim:
    """A claim whose holder is gone, now locked by the rescuing session."""

    delivery: Delivery
    claimed_at: datetime
    claimed_by: str
    batch_id: int | None  # the recorded batch the row was sent in; None: sent alone
    batch_rows: int = 0  # rows still 'sending' in that batch, found here or not (whole: as many as found)
    carrier: str | None = None  # the transport the claim went to when not its own (or pinned) one; record_carrier


# A batch member's To, Cc and Bcc as its request carried them (suppressed recipients left out).
Recipients = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class RecordedBatch:
    """A provider batch request as recorded before it was made (email_batches)."""

    id: int
    transport: str
    key: str  # the idempotency key of every request of this batch
    member_ids: tuple[int, ...]  # in request order
    sends: int  # requests made under the key so far
    recipients: tuple[Recipients, ...] | None = None  # per member, request order; None: recorded before schema 19
    digest: str | None = None  # of the request (the transport's batch_digest); None: recorded before schema 19

    def as_sent(self, members: Sequence[Delivery]) -> list[Delivery]:
        """The members (in request order) with the recipients the request carried."""
        if self.recipients is None:  # recorded before schema 19: the rows as stored
            return list(members)
        return [dataclasses.replace(d, to_addresses=to, cc_addresses=cc, bcc_addresses=bcc)
                for d, (to, cc, bcc) in zip(members, self.recipients, strict=True)]


@dataclass(frozen=True, slots=True)
class OutcomeWrite:
    """A decided transition and its attempt (not written when the transition gives the claim back untried)."""

    delivery: Delivery
    transition: Transition
    attempt: AttemptRecord


def outcome_parameters(writes: Sequence[OutcomeWrite]) -> tuple[list[Any], ...]:
    """The parameters of the record_outcomes query, $1 to $22, one array element per write."""
    t = [w.transition for w in writes]
    a = [w.attempt for w in writes]
    return (
        [w.delivery.id for w in writes],  # $1, also the attempts' delivery_id
        [w.delivery.claim_token for w in writes],  # $2: the fence
        [x.status.value for x in t],
        [x.scheduled_at for x in t],
        [x.last_error for x in t],
        [x.provider_message_id for x in t],
        [x.sent_at for x in t],
        [1 if x.refund_attempt else 0 for x in t],
        [json.dumps(x.retry_recipients) if x.retry_recipients is not None else None for x in t],
        [json.dumps(x.refused_recipients) if x.refused_recipients else None for x in t],  # $10
        [x.attempt for x in a],  # $11
        [x.started_at for x in a],
        [x.finished_at for x in a],
        [None if x.given_back else y.outcome.value for x, y in zip(t, a, strict=True)],  # $14 (none: no attempt)
        [x.reply_code for x in a],
        [x.enhanced_code for x in a],
        [x.error for x in a],
        [x.transport for x in a],
        [x.worker for x in a],
        [_refused_json(x.refused) for x in a],  # $20
        [x.message_id for x in a],  # $21: the attempt's Message-ID
        [x.reply for x in a],  # $22
    )


def _recipients(text: str | None) -> tuple[Recipients, ...] | None:
    if text is None:
        return None
    return tuple((tuple(to), tuple(cc), tuple(bcc)) for to, cc, bcc in json.loads(text))


def _refused_json(refused: Sequence[RefusedRecipient]) -> str | None:
    if not refused:
        return None
    return json.dumps([{"address": r.address, "reply_code": r.reply_code, "message": r.message,
                        "unknown": r.unknown} for r in refused])


class ClaimSession:
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

    def __init__(self, conn: asyncpg.Connection) -> None:
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
    ) -> list[Delivery]:
        """Claim due rows, writing the Message-ID of each first claimed (message_ids.py); a row
        that cannot be read comes back with ``defect`` set (see rows.py)."""
        token = uuid.uuid4()
        async with self._lock:
            self._idle = False
            # on an error the session is closed and its locks go with it: nothing to keep
            unlock, self._unlock_later = self._unlock_later, []
            with translate_errors():
                rows = await self._conn.fetch(sql("claim_due"), limit, token, worker, list(paused), default_transport,
                                              unlock, max_content_bytes, message_ids.inner_pad, message_ids.outer_pad,
                                              message_ids.default_from, message_ids.fallback_domain)
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

    async def find_dead_claims(
        self, older_than_seconds: float, limit: int, *, own: Sequence[int] | Callable[[], Sequence[int]] = (),
        max_content_bytes: int = 10 * 1024 * 1024, message_ids: MessageIdKey = DEFAULT_KEY,
        dead_workers: Sequence[str] = (), worker: str = "", started_at: datetime | None = None,
    ) -> list[DeadClaim]:
        """Claims whose holder is gone, each now locked by this session; with a row sent in a recorded
        batch, every other member still in that batch, whatever its own claim time.

        ``own``: ids this session claimed itself (a session's advisory locks are re-entrant, so
        they would look free to it); a callable is asked once the session is this call's, so that
        a claim made meanwhile is counted. ``dead_workers``: workers whose processes are provably
        dead (processes.py), whose claims need not wait for ``older_than_seconds``; under this
        process's own ``worker`` name, only those claimed before ``started_at``.
        ``message_ids``: to give a claim of a daemon that did not write the row's Message-ID the one
        it sent (message_ids.py).
        """
        async with self._lock:
            ids = list(own() if callable(own) else own)
            with translate_errors():
                rows = await self._conn.fetch(sql("find_dead_claims"), older_than_seconds, limit, ids,
                                              max_content_bytes, message_ids.inner_pad, message_ids.outer_pad,
                                              message_ids.default_from, message_ids.fallback_domain,
                                              list(dead_workers), worker, started_at)
                deliveries = await screened(self._conn, rows, max_content_bytes)
        return [DeadClaim(d, r["claimed_at"], r["claimed_by"], r["batch_id"], r["batch_rows"], r["carrier"])
                for d, r in zip(deliveries, rows, strict=True)]

    async def process_seen(self, me: ProcessIdentity, worker: str,
                           forget_after_seconds: float) -> list[tuple[str, ProcessIdentity]]:
        """Say this process is alive (schema 13); returns (worker, process) of every worker with a
        process in this boot and pid namespace."""
        async with self._lock:
            with translate_errors():
                rows = await self._conn.fetch(sql("process_seen"), me.boot_id, me.pid_ns, me.pid, me.start_ticks,
                                              worker, forget_after_seconds)
        return [(r["worker"], ProcessIdentity(r["boot_id"], r["pid_ns"], r["pid"], r["start_ticks"])) for r in rows]

    async def server_now(self) -> datetime:
        async with self._lock:
            with translate_errors():
                return await self._conn.fetchval("SELECT now()")

    async def process_gone(self, me: ProcessIdentity) -> None:
        async with self._lock:
            with translate_errors():
                await self._conn.execute(sql("process_gone"), me.boot_id, me.pid_ns, me.pid, me.start_ticks)

    async def dead_claims_left(self, workers: Sequence[str], own: Callable[[], Sequence[int]]) -> int:
        async with self._lock:
            with translate_errors():
                return int(await self._conn.fetchval(sql("dead_claims_left"), list(workers), list(own())))

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
        return row["id"] if row["members"] == len(members) else None

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
                    [x.transport for x in a], [x.worker for x in a], [x.message_id for x in a])

    async def batches(self, ids: Sequence[int]) -> dict[int, RecordedBatch]:
        async with self._lock:
            with translate_errors():
                rows = await self._conn.fetch(sql("batches"), list(ids))
        return {r["id"]: RecordedBatch(r["id"], r["transport"], r["idempotency_key"], tuple(r["member_ids"]),
                                       r["sends"], _recipients(r["recipients"]), r["request_digest"]) for r in rows}

    async def batch_resent(self, batch_id: int) -> int:
        """Count one more request of a recorded batch (before it is made); returns the requests so far."""
        async with self._lock:
            with translate_errors():
                return int(await self._conn.fetchval(sql("batch_resent"), batch_id))

    async def prune_batches(self, older_than_seconds: float) -> None:
        async with self._lock:
            with translate_errors():
                await self._conn.execute(sql("prune_batches"), older_than_seconds)


class Listener:
    """LISTENs on the trigger's channel; calls ``on_notify()`` for every notification."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn

    @classmethod
    async def open(cls, url: str, on_notify: Callable[[], None], *, timeout: float = 10.0,
                   limits: SessionLimits | None = None) -> Listener:
        conn = await connect(url, timeout, limits)
        with translate_errors():
            await conn.add_listener(CHANNEL, lambda *_: on_notify())
        return cls(conn)

    def is_closed(self) -> bool:
        return self._conn.is_closed()

    async def ping(self, timeout: float) -> None:
        with translate_errors():
            await self._conn.execute("SELECT 1", timeout=timeout)

    def abort(self) -> None:
        self._conn.terminate()

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._conn.close(timeout=5)
