"""Short operations on a small connection pool: the CLI, migrations, enqueue, retention."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from ..delivery_events.suppression import form_or_none
from ..errors import ContentRemoved, InvalidTransition, NotFound, SchemaMismatch
from .connection import (
    Conn,
    SessionLimits,
    affected,
    connect_each_host,
    init_reading_connection,
    one,
    translate_errors,
    uncancelled,
)
from .migrations import Migration, expected_schema_version
from .queries import sql

ENVELOPE_FORM_SCHEMA = 20  # sql/0020_envelope_suppressions.sql: suppressions in the envelope's form


async def _rewrite_old_forms(conn: Conn) -> int:
    """The Python step of schema 20: suppressions written before it, in the envelope's form (suppression.py)."""
    old = [r["address"] for r in await conn.fetch(sql("old_form_suppressions"))]
    if old:
        await conn.execute(sql("rewrite_suppressions"), old, [form_or_none(a) or a for a in old])
    return len(old)


class Store:
    """Short operations on a small connection pool."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    @classmethod
    async def open(cls, url: str, *, max_size: int = 4, timeout: float = 10.0,
                   limits: SessionLimits | None = None) -> Store:
        """A pool; ``limits`` for the daemon's own (not migrate's, whose statements may be long)."""

        async def setup(conn: PoolConnectionProxy[asyncpg.Record]) -> None:  # at each acquire: a release runs RESET ALL
            if limits is not None:
                await limits.apply(conn, heartbeated=False)

        with translate_errors():
            pool = await uncancelled(asyncpg.create_pool(
                url, min_size=1, max_size=max_size, timeout=timeout, init=init_reading_connection,
                setup=setup if limits is not None else None, connect=connect_each_host,
                command_timeout=limits.command_timeout if limits is not None else None,
                server_settings={"application_name": "outbox-mailer"},
            ), lambda p: p.close())
        return cls(pool)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._pool.close()

    @contextlib.asynccontextmanager
    async def _conn(self) -> AsyncIterator[Conn]:
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
            if max([*applied, *(m.version for m in done)], default=0) >= ENVELOPE_FORM_SCHEMA:
                await _rewrite_old_forms(conn)
            return done

    async def finish_suppression_forms(self) -> int:
        """Rewrite suppressions still in a form older than schema 20 (a schema applied by another
        migration tool): the daemon does it at start. Returns how many were rewritten."""
        async with self._conn() as conn, conn.transaction():
            return await _rewrite_old_forms(conn)

    async def schema_version(self) -> int | None:
        async with self._conn() as conn:
            try:
                version: int | None = await conn.fetchval(sql("schema_version"))
            except asyncpg.exceptions.UndefinedTableError:
                return None
            return version

    async def require_schema(self) -> None:
        """SchemaMismatch unless the database is at the schema this version of outbox-mailer needs."""
        version, expected = await self.schema_version(), expected_schema_version()
        if version != expected:
            raise SchemaMismatch(
                f"database schema is at version {version or 'none'}, this outbox-mailer needs {expected}: "
                "run `outbox-mailer migrate`"
            )

    async def enqueue(self, email: dict[str, Any]) -> int | None:
        """Insert one email (its own subject and bodies, or a template); None when the dedupe key already exists."""
        async with self._conn() as conn:
            delivery_id: int | None = await conn.fetchval(
                sql("enqueue"),
                email["dedupe_key"], email.get("from_address"), email["to_addresses"],
                email.get("cc_addresses") or [], email.get("bcc_addresses") or [], email.get("reply_to"),
                email.get("subject"), email.get("text_body"), email.get("html_body"), email.get("headers") or {},
                email.get("attachments") or [], email.get("metadata") or {}, email.get("transport"),
                email.get("priority") or 0, email.get("scheduled_at"), email.get("expires_at"),
                email.get("max_attempts"), bool(email.get("ignore_suppressions")), email.get("unsubscribe_category"),
                email.get("template"), email.get("template_data"), email.get("locale"),
            )
        return delivery_id

    async def status(self, keys: Sequence[str]) -> list[dict[str, Any]]:
        async with self._conn() as conn:
            rows = await conn.fetch(sql("status_by_keys"), list(keys))
        return [dict(r) for r in rows]

    async def attempts(self, delivery_id: int) -> list[dict[str, Any]]:
        async with self._conn() as conn:
            return [dict(r) for r in await conn.fetch(sql("attempts_of"), delivery_id)]

    async def retry(self, key: str, extra_attempts: int) -> None:
        """Back to pending now with ``extra_attempts`` more tries."""
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
        await self.refusal(key, name)

    async def refusal(self, key: str, name: str) -> None:
        """Why action ``name`` changed nothing: :class:`NotFound`, or :class:`InvalidTransition` from the row's
        status."""
        async with self._conn() as conn:
            row = await conn.fetchrow(sql("status_of"), key)
        if row is None:
            raise NotFound(key)
        if name == "retry" and row["scrubbed"]:
            raise ContentRemoved(key, row["status"])
        raise InvalidTransition(key, row["status"], name)

    # ---- transport pauses (schema 24: the rules are its functions; each call is an operator action)

    async def pause_transport(self, transport: str, actor: str, reason: str,
                              until: datetime | None) -> dict[str, Any]:
        """Pause ``transport`` until ``until`` (None: until resumed), replacing its operator pause."""
        async with self._conn() as conn:
            return dict(one(await conn.fetchrow(sql("pause_transport"), transport, actor, reason, until)))

    async def resume_transport(self, transport: str, actor: str) -> list[str]:
        """Lift every pause of ``transport`` (operator's, breaker's); the sources lifted (none: it was not paused)."""
        async with self._conn() as conn:
            lifted: list[str] = await conn.fetchval(sql("resume_transport"), transport, actor)
        return lifted

    async def paused_transports(self) -> list[dict[str, Any]]:
        """The pauses in force, by transport, the operator's before the breaker's."""
        async with self._conn() as conn:
            return [dict(r) for r in await conn.fetch(sql("paused_transports"))]

    async def list_by_status(self, statuses: Sequence[str], since_seconds: float, limit: int) -> list[dict[str, Any]]:
        async with self._conn() as conn:
            return [dict(r) for r in await conn.fetch(sql("list_by_status"), list(statuses), since_seconds, limit)]

    async def count_retryable(self, status: str, since_seconds: float) -> tuple[int, int]:
        """Rows of ``status`` changed within the window: how many a bulk retry would requeue, and how
        many it leaves because retention removed their content."""
        async with self._conn() as conn:
            row = one(await conn.fetchrow(sql("count_retryable"), status, since_seconds))
        return int(row["retryable"]), int(row["scrubbed"])

    async def retry_bulk(self, status: str, since_seconds: float, extra_attempts: int | None, default_attempts: int,
                         batch: int = 1000) -> int:
        """Requeue in short transactions of ``batch`` rows, each with ``extra_attempts`` more attempts
        (None: as many as its own max_attempts, ``default_attempts`` when that is null); never a row whose
        content retention removed. Returns how many."""
        total = 0
        while True:
            async with self._conn() as conn:
                n = affected(await conn.execute(sql("retry_bulk"), status, since_seconds, extra_attempts, batch,
                                                default_attempts))
            total += n
            if n < batch:
                return total

    async def stats(self) -> dict[str, Any]:
        async with self._conn() as conn:
            row = one(await conn.fetchrow(sql("stats")))
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
            return affected(await conn.execute(sql("scrub_batch"), older_than_seconds, limit))

    async def delete_batch(self, older_than_seconds: float, limit: int) -> int:
        async with self._conn() as conn:
            return affected(await conn.execute(sql("delete_batch"), older_than_seconds, limit))

    async def delete_unmatched_events(self, older_than_seconds: float, limit: int) -> int:
        async with self._conn() as conn:
            return affected(await conn.execute(sql("delete_unmatched_events"), older_than_seconds, limit))

    async def forget_webhook_tokens(self, older_than_seconds: float, limit: int) -> int:
        async with self._conn() as conn:
            return affected(await conn.execute(sql("forget_webhook_tokens"), older_than_seconds, limit))

    async def count_prunable(self, scrub_after_seconds: float, delete_after_seconds: float) -> tuple[int, int]:
        async with self._conn() as conn:
            row = one(await conn.fetchrow(sql("count_prunable"), scrub_after_seconds, delete_after_seconds))
        return int(row["to_scrub"]), int(row["to_delete"])

    async def run_script(self, statements: Sequence[str]) -> None:
        """Run statements in one transaction (grants)."""
        async with self._conn() as conn, conn.transaction():
            for statement in statements:
                await conn.execute(statement)

    async def run_sql(self, script: str) -> None:
        """Run an SQL script as an application would send it, transaction commands included (the demo)."""
        async with self._conn() as conn:
            await conn.execute(script)
