"""What the operator console reads and changes: users, sessions, the filtered email list, one email, the
overview, actions. Its database role changes no row directly: every action (retry, cancel, resolve of
one email or of a bulk selection, suppress, unsuppress, pause and resume of a transport) is a call of a
function of the schema (22, 24) that applies the CLI's rules, takes the actor from the operator's session
row (:class:`Actor`) and records the action in email_operator_actions.

The email list's statements are named blocks of console_queries.sql with one parameter layout (a
filter that is absent is null); every value the console got from a URL or a form is a parameter, and
no SQL is put together here. No index of email_deliveries
may name a column the daemon changes (status among them), so a page of the list walks
email_deliveries_created_idx newest (or oldest) first and stops after ``SCAN_ROWS`` rows: a rare
status or transport fills its page over several "search older" steps instead of reading the whole
table at once. The recipient filter reads its own index (schema 18); ``in_doubt`` rows are found
by the ids the console's census collected (console/census.py), their status checked again here.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Literal

from ..errors import DatabaseError
from .connection import one
from .events import EventStore
from .queries import sql
from .templates import TemplateReads

MAX_BULK = 10_000  # rows one bulk action may change (one transaction; narrow the filter for more)
SCAN_ROWS = 10_000  # rows of email_deliveries one page of a filtered list reads at most
RETRYABLE = ("failed", "cancelled", "in_doubt")
BulkAction = Literal["retry", "cancel"]


@dataclass(frozen=True, slots=True)
class Page:
    """A page of the email list; ``after``: where the next starts (None: this is the last). ``searched``:
    when not 0, the page holds every match among the ``searched`` rows it read, and the next reads on."""

    rows: list[dict[str, Any]]
    after: tuple[datetime, int] | None
    searched: int = 0


class SelectionChanged(DatabaseError):
    """A bulk action's selection no longer holds the count the operator confirmed: nothing was done."""

    def __init__(self, expected: int, found: int) -> None:
        super().__init__(f"the selection holds {found} emails now, not the {expected} confirmed: nothing was done")
        self.expected, self.found = expected, found


@dataclass(frozen=True, slots=True)
class Actor:
    """Who acts: the session row of a signed-in user (``token_hash``), or a user the trusted proxy named
    (None: a session row is made for the action's transaction alone)."""

    token_hash: bytes | None
    user: str
    role: str


@dataclass(frozen=True, slots=True)
class EmailFilter:
    """The email list's filters; None: not filtered on."""

    status: str | None = None
    transport: str | None = None
    recipient: str | None = None  # a whole To, Cc or Bcc address (its addr-spec, any case; no part of one)
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


def _walk(f: EmailFilter, after: tuple[datetime, int] | None) -> list[Any]:
    """Parameters $1 to $4 of the list's statements (console_queries.sql): the range on created_at and
    the keyset the page starts after."""
    return [f.created_after, f.created_before, *(after if after is not None else (None, None))]


def _filters(f: EmailFilter, default_transport: str) -> list[Any]:
    """Parameters $6 to $11: the filters tested on each row (None: not filtered on)."""
    return [f.status, f.transport, default_transport, f.recipient, f.key, f.event]


class ConsoleStore(EventStore, TemplateReads):
    """The console's pool (its own role: grants/roles.sql, console_role). Templates are read only
    (:class:`~outbox_mailer.store.templates.TemplateReads`)."""

    # ---- users

    async def user(self, name: str) -> dict[str, Any] | None:
        """The user's name and role (never its hash)."""
        async with self._conn() as conn:
            row = await conn.fetchrow(sql("console_user"), name)
        return dict(row) if row is not None else None

    async def password_hash(self, name: str) -> str | None:
        async with self._conn() as conn:
            stored: str | None = await conn.fetchval(sql("console_password_hash"), name)
        return stored

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

    # ---- sessions (email_console_sessions: hashes of their tokens)

    async def start_session(self, token_hash: bytes, user: str, role: str, *, session_seconds: float,
                            idle_seconds: float) -> None:
        """A new session; the expired ones are forgotten on the way."""
        async with self._conn() as conn, conn.transaction():
            await conn.execute(sql("console_sessions_expire"), session_seconds, idle_seconds)
            await conn.execute(sql("console_session_start"), token_hash, user, role)

    async def session(self, token_hash: bytes, *, session_seconds: float, idle_seconds: float,
                      seen: bool) -> tuple[str, str] | None:
        """The session's (user, role) while it lasts and its user has that role (ended otherwise);
        ``seen``: the request counts as activity."""
        async with self._conn() as conn:
            row = await conn.fetchrow(sql("console_session"), token_hash, session_seconds, idle_seconds)
            if row is None:
                await conn.execute(sql("console_session_end"), token_hash)
                return None
            if seen:
                await conn.execute(sql("console_session_seen"), token_hash)
        return row["user_name"], row["role"]

    async def end_session(self, token_hash: bytes) -> None:
        async with self._conn() as conn:
            await conn.execute(sql("console_session_end"), token_hash)

    # ---- the email list

    async def emails(self, f: EmailFilter, default_transport: str, *, after: tuple[datetime, int] | None,
                     limit: int, in_doubt_ids: list[int] | None = None) -> Page:
        """One page of the filtered list, newest (or oldest) first, after the keyset ``after``.
        ``in_doubt_ids``: the candidates of a status=in_doubt filter (the census's)."""
        order = "oldest" if f.oldest_first else "newest"
        walk, filters = _walk(f, after), _filters(f, default_transport)
        narrowed_by: list[int] | str | int  # $5
        if f.status == "in_doubt" and in_doubt_ids is not None:
            name, narrowed_by, bounded = f"console_emails_among_{order}", in_doubt_ids, False
        elif f.recipient is not None:
            name, narrowed_by, bounded = f"console_emails_to_{order}", f.recipient, False
        else:  # a window of SCAN_ROWS rows along created_at, filtered; without filters, the page itself
            bounded = any(v is not None for v in (f.status, f.transport, f.key, f.event))
            name, narrowed_by = f"console_emails_{order}", SCAN_ROWS if bounded else limit + 1
        async with self._conn() as conn:
            rows = [dict(r) for r in await conn.fetch(sql(name), *walk, narrowed_by, *filters, limit + 1)]
            if len(rows) > limit:
                return Page(rows[:limit], (rows[limit - 1]["created_at"], rows[limit - 1]["id"]))
            if not bounded:
                return Page(rows, None)
            # the window's last row, and whether any lies beyond it
            edge = await conn.fetch(sql(f"console_window_edge_{order}"), *walk, SCAN_ROWS)
        if len(edge) < 2:
            return Page(rows, None)
        return Page(rows, (edge[0]["created_at"], edge[0]["id"]), SCAN_ROWS)

    async def count_selection(self, f: EmailFilter, default_transport: str, action: BulkAction) -> int:
        """How many rows of the filter a bulk ``action`` would change (retry: failed, cancelled or
        in_doubt ones whose content retention has not removed; cancel: pending ones)."""
        async with self._conn() as conn:
            return int(await conn.fetchval(sql("console_count_selection"), *_walk(f, None), action,
                                           *_filters(f, default_transport)))

    async def bulk(self, f: EmailFilter, default_transport: str, action: BulkAction, *, expected: int,
                   actor: Actor, default_attempts: int) -> list[str]:
        """Retry or cancel every row of the selection, in one transaction, when it holds ``expected``
        rows, at most MAX_BULK, and still does as they change (:class:`SelectionChanged` otherwise,
        and nothing is done). Returns the keys changed."""
        async with self._conn() as conn:  # more than MAX_BULK is never the count confirmed
            keys = [r["dedupe_key"] for r in await conn.fetch(
                sql("console_bulk_selection"), *_walk(f, None), action, *_filters(f, default_transport), MAX_BULK + 1)]
        if len(keys) != expected:
            raise SelectionChanged(expected, len(keys))
        detail = {"bulk": True, "count": expected, "filter": _described(f)}
        return await self.act(actor, action, keys, default_attempts=default_attempts, detail=detail,
                              expected=expected)

    # ---- actions (functions of schema 22: the CLI's rules, the actor from a session row)

    async def act(self, actor: Actor, action: str, keys: list[str], *, outcome: str | None = None,
                  default_attempts: int, detail: dict[str, Any], expected: int | None = None) -> list[str]:
        """Retry, cancel or resolve (as ``outcome``) the rows of ``keys`` that the action may take;
        the keys changed. ``expected``: how many must change (:class:`SelectionChanged` otherwise, and
        nothing is)."""
        async with self._conn() as conn, conn.transaction():
            session = await _session_of(conn, actor)
            done = [r["k"] for r in await conn.fetch(sql("console_act"), session, action, keys, outcome,
                                                     default_attempts, detail)]
            if expected is not None and len(done) != expected:
                raise SelectionChanged(expected, len(done))
            await _end_proxied(conn, actor, session)
        return done

    async def act_on(self, actor: Actor, action: str, key: str, *, outcome: str | None = None,
                     default_attempts: int, detail: dict[str, Any]) -> None:
        """One row's action (:class:`NotFound`, :class:`InvalidTransition` when it changed nothing)."""
        if not await self.act(actor, action, [key], outcome=outcome, default_attempts=default_attempts,
                              detail=detail):
            await self.refusal(key, action)

    async def console_suppress(self, actor: Actor, address: str, reason: str, expires_at: datetime | None) -> None:
        await self._as_operator(actor, "console_suppress", address, reason, expires_at)

    async def console_unsuppress(self, actor: Actor, address: str) -> bool:
        return bool(await self._as_operator(actor, "console_unsuppress", address))

    async def console_pause(self, actor: Actor, transport: str, reason: str, until: datetime | None) -> None:
        await self._as_operator(actor, "console_pause", transport, reason, until)

    async def console_resume(self, actor: Actor, transport: str) -> bool:
        """Lift every pause of ``transport``; whether one was in force."""
        return bool(await self._as_operator(actor, "console_resume", transport))

    async def _as_operator(self, actor: Actor, query: str, *args: Any) -> Any:
        """Run the action ``query`` (its $1: the actor's session row) in one transaction; its value."""
        async with self._conn() as conn, conn.transaction():
            session = await _session_of(conn, actor)
            value = await conn.fetchval(sql(query), session, *args)
            await _end_proxied(conn, actor, session)
        return value

    # ---- one email

    async def email(self, key: str) -> dict[str, Any] | None:
        async with self._conn() as conn:
            row = await conn.fetchrow(sql("email_by_key"), key)
        return dict(row) if row is not None else None

    async def actions_of(self, key: str) -> list[dict[str, Any]]:
        async with self._conn() as conn:
            return [{**dict(r), "detail": json.loads(r["detail"])} for r in await conn.fetch(sql("actions_of"), key)]

    async def template_versions(self, name: str, limit: int) -> list[dict[str, Any]]:
        """Every version of template ``name`` (at most ``limit``): its locale, number, when and by whom."""
        async with self._conn() as conn:
            return [dict(r) for r in await conn.fetch(sql("console_template_versions"), name, limit)]

    # ---- the overview

    async def census(self, default_transport: str, max_ids: int) -> list[dict[str, Any]]:
        """Rows by status and transport, with the ids of up to ``max_ids`` in_doubt rows: one scan of
        the whole table (console/census.py decides how often)."""
        async with self._conn() as conn:
            return [dict(r) for r in await conn.fetch(sql("console_census"), default_transport, max_ids)]

    async def outcomes(self, bucket_seconds: int, since_seconds: int) -> list[dict[str, Any]]:
        async with self._conn() as conn:
            return [dict(r) for r in await conn.fetch(sql("console_outcomes"), bucket_seconds, since_seconds)]

    async def event_rates(self, since_seconds: int) -> dict[str, Any]:
        async with self._conn() as conn:
            return dict(one(await conn.fetchrow(sql("console_event_rates"), since_seconds)))

    async def live(self, default_transport: str) -> dict[str, Any]:
        """What the overview reads on every request: the queue by transport, the oldest due row's
        age, the transports held back."""
        async with self._conn() as conn:
            queue = [dict(r) for r in await conn.fetch(sql("console_queue_counts"), default_transport)]
            oldest = await conn.fetchval(sql("console_oldest_due"))
            held = [dict(r) for r in await conn.fetch(sql("console_held"))]
        return {"queue": queue, "oldest_due_seconds": oldest, "held": held}

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


async def _session_of(conn: Any, actor: Actor) -> bytes:
    """The session row the action's actor comes from (for a proxied user: one made for this transaction)."""
    if actor.token_hash is not None:
        return actor.token_hash
    made = secrets.token_bytes(32)
    await conn.execute(sql("console_session_proxied"), made, actor.user, actor.role)
    return made


async def _end_proxied(conn: Any, actor: Actor, session: bytes) -> None:
    if actor.token_hash is None:
        await conn.execute(sql("console_session_end"), session)
