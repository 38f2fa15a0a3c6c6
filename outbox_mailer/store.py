"""The database edge: the only module that imports asyncpg.

* :class:`Store` – short operations on a small pool (CLI, migrate, enqueue).
* :class:`ClaimSession` – the daemon's claiming connection. Advisory locks
  are session level, so claims, outcome writes and unlocks all run on this one
  connection, one statement at a time.
* :class:`Listener` – a connection that LISTENs for the insert trigger.

asyncpg errors are translated here into :mod:`outbox_mailer.errors`.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import anyio
import asyncpg

from .decide import Transition
from .delivery import Delivery, OutcomeKind
from .errors import (
    DatabaseError,
    DatabaseUnavailable,
    InvalidTransition,
    NotFound,
    SchemaMismatch,
)
from .migrations import Migration
from .queries import sql

CHANNEL = "outbox_mailer"
_UNAVAILABLE = (
    OSError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.ConnectionFailureError,
    asyncpg.exceptions.TooManyConnectionsError,
    asyncpg.exceptions.InternalClientError,
    asyncpg.exceptions.InterfaceError,
    TimeoutError,
)


@contextlib.contextmanager
def translate_errors() -> Any:
    try:
        yield
    except asyncpg.exceptions.UndefinedTableError as exc:
        raise SchemaMismatch(f"{exc}; run `outbox-mailer migrate`") from exc
    except _UNAVAILABLE as exc:
        raise DatabaseUnavailable(f"database unavailable: {exc}") from exc
    except asyncpg.PostgresError as exc:
        raise DatabaseError(f"database error: {exc}") from exc


async def _init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def _connect(url: str, timeout: float) -> asyncpg.Connection:
    with translate_errors():
        conn = await asyncpg.connect(url, timeout=timeout, server_settings={"application_name": "outbox-mailer"})
        await _init_connection(conn)
        return conn


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


@dataclass(frozen=True, slots=True)
class OutcomeWrite:
    delivery: Delivery
    transition: Transition
    attempt: AttemptRecord


def _delivery(row: asyncpg.Record) -> Delivery:
    return Delivery(
        id=row["id"],
        dedupe_key=row["dedupe_key"],
        claim_token=row["claim_token"],
        attempts=row["attempts"],
        max_attempts=row["max_attempts"],
        from_address=row["from_address"],
        to_addresses=tuple(row["to_addresses"]),
        cc_addresses=tuple(row["cc_addresses"]),
        bcc_addresses=tuple(row["bcc_addresses"]),
        reply_to=row["reply_to"],
        subject=row["subject"],
        text_body=row["text_body"],
        html_body=row["html_body"],
        headers=row["headers"],
        attachments=row["attachments"],
        metadata=row["metadata"],
        transport=row["transport"],
        priority=row["priority"],
        scheduled_at=row["scheduled_at"],
        expires_at=row["expires_at"],
        created_at=row["created_at"],
        first_attempt_at=row["first_attempt_at"],
    )


def _affected(status: str) -> int:
    """Rows affected, from a command tag such as 'UPDATE 42' or 'DELETE 0'."""
    return int(status.rsplit(" ", 1)[-1])


class ClaimSession:
    """The daemon's claiming connection (holds the per-key advisory locks)."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn
        self._lock = anyio.Lock()

    @classmethod
    async def open(cls, url: str, *, timeout: float = 10.0) -> ClaimSession:
        return cls(await _connect(url, timeout))

    async def close(self) -> None:
        """Closing the session releases every advisory lock it holds."""
        with contextlib.suppress(Exception):
            await self._conn.close(timeout=5)

    def is_closed(self) -> bool:
        return self._conn.is_closed()

    async def claim_due(
        self, limit: int, worker: str, *, paused: Sequence[str] = (), default_transport: str = "smtp"
    ) -> list[Delivery]:
        token = uuid.uuid4()
        async with self._lock:
            with translate_errors():
                rows = await self._conn.fetch(sql("claim_due"), limit, token, worker, list(paused), default_transport)
        return [_delivery(r) for r in rows]

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
                return [r["dedupe_key"] for r in await self._conn.fetch(sql("relock"), list(keys))]

    async def record_outcomes(self, writes: Sequence[OutcomeWrite], *, release: bool = True) -> set[int]:
        """Apply transitions fenced on the claim, then (``release``) unlock their keys.

        Both statements run back to back on this session with nothing between
        them. Returns the ids whose claim was still ours.
        """
        if not writes:
            return set()
        t = [w.transition for w in writes]
        a = [w.attempt for w in writes]
        ids = [w.delivery.id for w in writes]
        args = (
            ids,
            [w.delivery.claim_token for w in writes],
            [x.status.value for x in t],
            [x.scheduled_at for x in t],
            [x.last_error for x in t],
            [x.provider_message_id for x in t],
            [x.sent_at for x in t],
            [1 if x.refund_attempt else 0 for x in t],
            ids,
            [x.attempt for x in a],
            [x.started_at for x in a],
            [x.finished_at for x in a],
            [x.outcome.value for x in a],
            [x.reply_code for x in a],
            [x.enhanced_code for x in a],
            [x.error for x in a],
            [x.transport for x in a],
            [x.worker for x in a],
        )
        async with self._lock:
            with translate_errors():
                rows = await self._conn.fetch(sql("record_outcomes"), *args)
                if release:
                    await self._conn.fetchval(sql("release_locks"), [w.delivery.dedupe_key for w in writes])
        return {r["id"] for r in rows}

    async def release_locks(self, keys: Sequence[str]) -> int:
        if not keys:
            return 0
        async with self._lock:
            with translate_errors():
                return int(await self._conn.fetchval(sql("release_locks"), list(keys)))

    async def count_pending(self) -> int:
        async with self._lock:
            with translate_errors():
                return int(await self._conn.fetchval(sql("count_pending")))

    async def next_due_at(self) -> datetime | None:
        async with self._lock:
            with translate_errors():
                return await self._conn.fetchval(sql("next_due_at"))

    async def find_dead_claims(
        self, older_than_seconds: float, limit: int, *, own: Sequence[int] = ()
    ) -> list[tuple[Delivery, datetime, str]]:
        """Claims whose holder is gone: (delivery, claimed_at, claimed_by), each now locked by this session.

        ``own``: ids this session claimed itself (a session's advisory locks are
        re-entrant, so they would look free to it).
        """
        async with self._lock:
            with translate_errors():
                rows = await self._conn.fetch(sql("find_dead_claims"), older_than_seconds, limit, list(own))
        return [(_delivery(r), r["claimed_at"], r["claimed_by"]) for r in rows]


class Listener:
    """LISTENs on the trigger's channel; calls ``on_notify()`` for every notification."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn

    @classmethod
    async def open(cls, url: str, on_notify: Callable[[], None], *, timeout: float = 10.0) -> Listener:
        conn = await _connect(url, timeout)
        with translate_errors():
            await conn.add_listener(CHANNEL, lambda *_: on_notify())
        return cls(conn)

    def is_closed(self) -> bool:
        return self._conn.is_closed()

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._conn.close(timeout=5)


class Store:
    """Short operations on a small connection pool."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    @classmethod
    async def open(cls, url: str, *, max_size: int = 4, timeout: float = 10.0) -> Store:
        with translate_errors():
            pool = await asyncpg.create_pool(
                url, min_size=1, max_size=max_size, timeout=timeout, init=_init_connection,
                server_settings={"application_name": "outbox-mailer"},
            )
        return cls(pool)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._pool.close()

    @contextlib.asynccontextmanager
    async def _conn(self) -> AsyncIterator[asyncpg.Connection]:
        with translate_errors():
            async with self._pool.acquire() as conn:
                yield conn

    async def migrate(self, migrations: Sequence[Migration]) -> list[Migration]:
        """Apply what is missing, in one transaction, serialised by an advisory lock."""
        async with self._conn() as conn, conn.transaction():
            await conn.execute(sql("lock_migrations"))
            await conn.execute(sql("ensure_migrations_table"))
            applied = {r["version"]: r for r in await conn.fetch(sql("applied_migrations"))}
            done: list[Migration] = []
            for m in migrations:
                if m.version in applied:
                    if applied[m.version]["checksum"] != m.checksum:
                        raise SchemaMismatch(
                            f"migration {m.name} was applied with different contents (checksum mismatch); "
                            "migrations are forward-only: add a new file instead of editing an applied one"
                        )
                    continue
                await conn.execute(m.sql)
                await conn.execute(sql("record_migration"), m.version, m.name, m.checksum)
                done.append(m)
            return done

    async def schema_version(self) -> int | None:
        async with self._conn() as conn:
            try:
                return await conn.fetchval(sql("schema_version"))
            except asyncpg.exceptions.UndefinedTableError:
                return None

    async def enqueue(self, email: dict[str, Any]) -> int | None:
        """Insert one email; None when the dedupe key already exists."""
        async with self._conn() as conn:
            return await conn.fetchval(
                sql("enqueue"),
                email["dedupe_key"], email.get("from_address"), email["to_addresses"],
                email.get("cc_addresses") or [], email.get("bcc_addresses") or [], email.get("reply_to"),
                email["subject"], email.get("text_body"), email.get("html_body"), email.get("headers") or {},
                email.get("attachments") or [], email.get("metadata") or {}, email.get("transport"),
                email.get("priority") or 0, email.get("scheduled_at"), email.get("expires_at"),
                email.get("max_attempts"),
            )

    async def status(self, keys: Sequence[str]) -> list[dict[str, Any]]:
        async with self._conn() as conn:
            rows = await conn.fetch(sql("status_by_keys"), list(keys))
        return [dict(r) for r in rows]

    async def attempts(self, delivery_id: int) -> list[dict[str, Any]]:
        async with self._conn() as conn:
            return [dict(r) for r in await conn.fetch(sql("attempts_of"), delivery_id)]

    async def retry(self, key: str, extra_attempts: int) -> None:
        await self._transition(key, "retry", (key, extra_attempts))

    async def cancel(self, key: str) -> None:
        await self._transition(key, "cancel", (key,))

    async def resolve(self, key: str, status: str) -> None:
        """Settle an in_doubt row as 'sent' or 'failed'."""
        if status not in ("sent", "failed"):
            raise ValueError("resolve to 'sent' or 'failed'")
        await self._transition(key, "resolve", (key, status))

    async def _transition(self, key: str, name: str, args: tuple[Any, ...]) -> None:
        async with self._conn() as conn:
            if await conn.fetchval(sql(name), *args) is not None:
                return
            status = await conn.fetchval(sql("status_of"), key)
        if status is None:
            raise NotFound(key)
        raise InvalidTransition(key, status, name)

    async def stats(self) -> dict[str, Any]:
        async with self._conn() as conn:
            row = await conn.fetchrow(sql("stats"))
        data = dict(row)
        age = data["oldest_due_age_seconds"]
        data["oldest_due_age_seconds"] = float(age) if age is not None else None
        return data

    async def count_unfinished(self) -> int:
        async with self._conn() as conn:
            return int(await conn.fetchval(sql("count_unfinished")))

    async def scrub_batch(self, older_than_seconds: float, limit: int) -> int:
        """Scrub up to ``limit`` final rows; returns how many (one short transaction)."""
        async with self._conn() as conn:
            return _affected(await conn.execute(sql("scrub_batch"), older_than_seconds, limit))

    async def delete_batch(self, older_than_seconds: float, limit: int) -> int:
        async with self._conn() as conn:
            return _affected(await conn.execute(sql("delete_batch"), older_than_seconds, limit))

    async def count_prunable(self, scrub_after_seconds: float, delete_after_seconds: float) -> tuple[int, int]:
        async with self._conn() as conn:
            row = await conn.fetchrow(sql("count_prunable"), scrub_after_seconds, delete_after_seconds)
        return int(row["to_scrub"]), int(row["to_delete"])

    async def run_script(self, statements: Sequence[str]) -> None:
        """Run statements in one transaction (grants)."""
        async with self._conn() as conn, conn.transaction():
            for statement in statements:
                await conn.execute(statement)

    async def execute(self, statement: str, *args: Any) -> str:
        """Run an arbitrary statement (tests and the demo)."""
        async with self._conn() as conn:
            return await conn.execute(statement, *args)

    async def fetch(self, statement: str, *args: Any) -> list[dict[str, Any]]:
        async with self._conn() as conn:
            return [dict(r) for r in await conn.fetch(statement, *args)]
