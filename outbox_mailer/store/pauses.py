"""Transport pauses as PostgreSQL keeps them (sql/0024_transport_pauses.sql): what a daemon reads about
once a second, and its circuit breaker's pauses that it publishes, on the LISTEN session it already
holds (listener.py). The operator's side (``pause``, ``resume``, the list) is :class:`Store`'s and the
console's; the rules of both are the schema's functions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from .connection import Conn, one, translate_errors
from .queries import sql

READ_TIMEOUT_SECONDS = 5.0  # a silent connection is noticed by the listener's heartbeat too


@dataclass(frozen=True, slots=True)
class PauseState:
    """One transport as the table says now: its operator pause (``paused``; ``seconds_left`` None: until
    resumed) and its latest resume (the database's time; None: never resumed)."""

    transport: str
    paused: bool
    seconds_left: float | None
    paused_by: str | None
    reason: str | None
    resumed_at: datetime | None


async def read_pauses(conn: Conn, transports: Sequence[str]) -> list[PauseState]:
    with translate_errors():
        rows = await conn.fetch(sql("transport_pauses"), list(transports), timeout=READ_TIMEOUT_SECONDS)
    return [PauseState(r["transport"], r["paused_by"] is not None, r["seconds_left"], r["paused_by"], r["reason"],
                       r["resumed_at"]) for r in rows]


async def publish_breaker_pause(conn: Conn, transport: str, paused_by: str, reason: str, seconds: float) -> datetime:
    """Publish a breaker pause of ``seconds`` from now; returns the database's time of it."""
    with translate_errors():
        row = one(await conn.fetchrow(sql("publish_breaker_pause"), transport, paused_by, reason, seconds,
                                      timeout=READ_TIMEOUT_SECONDS))
    at: datetime = row["at"]
    return at
