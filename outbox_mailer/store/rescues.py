"""The rescuer's statements, on the claim session (:class:`~outbox_mailer.store.claims.ClaimSession`
inherits them, for its advisory locks are the ones a rescue takes): claims whose holder is gone, the
processes this host knows of, and the provider batches recorded before their requests so that a
rescuer can resend one identically.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import anyio
import asyncpg

from ..delivery import Delivery
from ..message.message_ids import DEFAULT_KEY, MessageIdKey
from .connection import translate_errors
from .events import screened
from .processes import ProcessIdentity
from .queries import sql


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


def _recipients(text: str | None) -> tuple[Recipients, ...] | None:
    if text is None:
        return None
    return tuple((tuple(to), tuple(cc), tuple(bcc)) for to, cc, bcc in json.loads(text))


class RescueQueries:
    """The rescuer's statements; each runs alone on the session's connection (its lock)."""

    _conn: asyncpg.Connection[asyncpg.Record]
    _lock: anyio.Lock

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
                now: datetime = await self._conn.fetchval("SELECT now()")
        return now

    async def process_gone(self, me: ProcessIdentity) -> None:
        async with self._lock:
            with translate_errors():
                await self._conn.execute(sql("process_gone"), me.boot_id, me.pid_ns, me.pid, me.start_ticks)

    async def dead_claims_left(self, workers: Sequence[str], own: Callable[[], Sequence[int]]) -> int:
        async with self._lock:
            with translate_errors():
                return int(await self._conn.fetchval(sql("dead_claims_left"), list(workers), list(own())))

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
