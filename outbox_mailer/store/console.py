"""What the operator console reads and changes: users, the filtered email list, one email, the overview,
bulk actions. Single-row actions and suppressions are :class:`Store`'s and :class:`EventStore`'s own,
the code the CLI runs, with an ``actor`` that records them in email_operator_actions.

The email list's WHERE clause is put together here from fixed pieces; every value the console got
from a URL or a form is a parameter ($n), never text of the statement.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Literal

from ..errors import DatabaseError
from ..queries import sql
from .events import EventStore

MAX_BULK = 10_000  # rows one bulk action may change (one transaction; narrow the filter for more)
RETRYABLE = ("failed", "cancelled", "in_doubt")
BulkAction = Literal["retry", "cancel"]


class SelectionChanged(DatabaseError):
    """A bulk action's selection no longer holds the count the operator confirmed: nothing was done."""

    def __init__(self, expected: int, found: int) -> None:
        super().__init__(f"the selection holds {found} emails now, not the {expected} confirmed: nothing was done")
        self.expected, self.found = expected, found


@dataclass(frozen=True, slots=True)
class EmailFilter:
    """The email list's filters; None: not filtered on."""

    status: str | None = None
    transport: str | None = None
    recipient: str | None = None  # a part of any To, Cc or Bcc address, any case
    key: str | None = None  # a dedupe-key prefix
    created_after: datetime | None = None
    created_before: datetime | None = None
    event: str | None = None  # the row's latest delivery event
    oldest_first: bool = False

    def is_empty(self) -> bool:
        return all(getattr(self, f.name) in (None, False) for f in fields(self))


def like_contains(text: str) -> str:
    """A LIKE pattern matching ``text`` anywhere, its own % _ and \\ taken literally."""
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _where(f: EmailFilter, default_transport: str, params: list[Any]) -> list[str]:
    def p(value: Any) -> str:
        params.append(value)
        return f"${len(params)}"

    conds = []
    if f.status is not None:
        conds.append(f"d.status = {p(f.status)}")
    if f.transport is not None:
        conds.append(f"(d.transport = {p(f.transport)}"
                     + (" OR d.transport IS NULL)" if f.transport == default_transport else ")"))
    if f.recipient is not None:
        conds.append(f"array_to_string(d.to_addresses || d.cc_addresses || d.bcc_addresses, ' ') ILIKE "
                     f"{p(like_contains(f.recipient))}")
    if f.key is not None:
        conds.append(f"starts_with(d.dedupe_key, {p(f.key)})")
    if f.created_after is not None:
        conds.append(f"d.created_at >= {p(f.created_after)}")
    if f.created_before is not None:
        conds.append(f"d.created_at < {p(f.created_before)}")
    if f.event is not None:
        conds.append(f"d.delivery_event = {p(f.event)}")
    return conds


LIST_COLUMNS = ("d.id, d.dedupe_key, d.status, d.transport, d.to_addresses, d.subject, d.attempts, d.created_at, "
                "d.updated_at, d.delivery_event, d.last_error")


class ConsoleStore(EventStore):
    """The console's pool (its own role: grants/roles.sql, console_role)."""

    # ---- users

    async def user(self, name: str) -> dict[str, Any] | None:
        async with self._conn() as conn:
            row = await conn.fetchrow(sql("console_user"), name)
        return dict(row) if row is not None else None

    async def add_user(self, name: str, role: str, password_hash: str) -> bool:
        """False when the name is taken."""
        async with self._conn() as conn:
            return await conn.fetchval(sql("console_user_add"), name, role, password_hash) is not None

    async def remove_user(self, name: str) -> bool:
        async with self._conn() as conn:
            return await conn.fetchval(sql("console_user_remove"), name) is not None

    async def users(self) -> list[dict[str, Any]]:
        async with self._conn() as conn:
            return [dict(r) for r in await conn.fetch(sql("console_users"))]

    # ---- the email list

    async def emails(self, f: EmailFilter, default_transport: str, *, after: tuple[datetime, int] | None,
                     limit: int) -> tuple[list[dict[str, Any]], tuple[datetime, int] | None]:
        """One page of the filtered list, newest (or oldest) first, after the keyset ``after``;
        the keyset of the next page (None: this is the last)."""
        params: list[Any] = []
        conds = _where(f, default_transport, params)
        if after is not None:
            params += list(after)
            conds.append(f"(d.created_at, d.id) {'>' if f.oldest_first else '<'} (${len(params) - 1}, ${len(params)})")
        direction = "ASC" if f.oldest_first else "DESC"
        params.append(limit + 1)
        query = (f"SELECT {LIST_COLUMNS} FROM email_deliveries d"
                 + (" WHERE " + " AND ".join(conds) if conds else "")
                 + f" ORDER BY d.created_at {direction}, d.id {direction} LIMIT ${len(params)}")
        async with self._conn() as conn:
            rows = [dict(r) for r in await conn.fetch(query, *params)]
        more = rows[limit:]
        rows = rows[:limit]
        return rows, ((rows[-1]["created_at"], rows[-1]["id"]) if more else None)

    def _selection(self, f: EmailFilter, default_transport: str, action: BulkAction,
                   params: list[Any]) -> str:
        conds = _where(f, default_transport, params)
        conds.append("d.status IN ('failed', 'cancelled', 'in_doubt')" if action == "retry" else "d.status = 'pending'")
        return "FROM email_deliveries d WHERE " + " AND ".join(conds)

    async def count_selection(self, f: EmailFilter, default_transport: str, action: BulkAction) -> int:
        """How many rows of the filter a bulk ``action`` would change (retry: failed, cancelled or
        in_doubt ones; cancel: pending ones)."""
        params: list[Any] = []
        query = f"SELECT count(*) {self._selection(f, default_transport, action, params)}"
        async with self._conn() as conn:
            return int(await conn.fetchval(query, *params))

    async def bulk(self, f: EmailFilter, default_transport: str, action: BulkAction, *, expected: int,
                   actor: str, default_attempts: int) -> list[str]:
        """Retry or cancel every row of the selection, in one transaction, when it still holds
        ``expected`` rows (:class:`SelectionChanged` otherwise, and nothing is done); each row's
        action is a row of email_operator_actions. Returns the keys changed."""
        params: list[Any] = []
        select = f"SELECT d.id {self._selection(f, default_transport, action, params)} ORDER BY d.id FOR UPDATE"
        detail = json.dumps({"bulk": True, "count": expected, "filter": _described(f)})
        async with self._conn() as conn, conn.transaction():
            ids = [r["id"] for r in await conn.fetch(select, *params)]
            if len(ids) != expected:
                raise SelectionChanged(expected, len(ids))
            if action == "retry":
                keys = [r["dedupe_key"] for r in await conn.fetch(sql("retry_rows"), ids, default_attempts)]
            else:
                keys = [r["dedupe_key"] for r in await conn.fetch(sql("cancel_rows"), ids)]
            await conn.execute(sql("record_actions"), actor, action, keys, detail)
        return keys

    # ---- one email

    async def email(self, key: str) -> dict[str, Any] | None:
        async with self._conn() as conn:
            row = await conn.fetchrow(sql("email_by_key"), key)
        return dict(row) if row is not None else None

    async def actions_of(self, key: str) -> list[dict[str, Any]]:
        async with self._conn() as conn:
            return [{**dict(r), "detail": json.loads(r["detail"])} for r in await conn.fetch(sql("actions_of"), key)]

    # ---- the overview

    async def overview(self, default_transport: str) -> dict[str, Any]:
        async with self._conn() as conn:
            counts = [dict(r) for r in await conn.fetch(sql("console_counts"), default_transport)]
            oldest = await conn.fetchval(sql("console_oldest_due"))
            held = [dict(r) for r in await conn.fetch(sql("console_held"))]
            minutes = [dict(r) for r in await conn.fetch(sql("console_outcomes"), 60, 3600)]
            hours = [dict(r) for r in await conn.fetch(sql("console_outcomes"), 3600, 7 * 86_400)]
            rates = dict(await conn.fetchrow(sql("console_event_rates"), 7 * 86_400))
        return {"counts": counts, "oldest_due_seconds": oldest, "held": held, "minutes": minutes, "hours": hours,
                "rates": rates}

    async def search_suppressions(self, text: str, limit: int) -> list[dict[str, Any]]:
        async with self._conn() as conn:
            return [dict(r) for r in await conn.fetch(sql("console_suppressions"), like_contains(text.lower()), limit)]


def _described(f: EmailFilter) -> dict[str, Any]:
    """The filter as JSON for the action's detail."""
    out: dict[str, Any] = {}
    for field in fields(f):
        value = getattr(f, field.name)
        if value not in (None, False):
            out[field.name] = value.isoformat() if isinstance(value, datetime) else value
    return out
