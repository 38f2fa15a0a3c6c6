"""A connection that LISTENs on the insert trigger's channel (the claim loop's wake-up); the daemon
also reads and publishes transport pauses on it (pauses.py), an idle connection it already holds."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from datetime import datetime

import asyncpg

from .connection import CHANNEL, SessionLimits, connect, translate_errors
from .pauses import PauseState, publish_breaker_pause, read_pauses


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

    async def pauses(self, transports: Sequence[str]) -> list[PauseState]:
        return await read_pauses(self._conn, transports)

    async def publish_breaker_pause(self, transport: str, paused_by: str, reason: str, seconds: float) -> datetime:
        return await publish_breaker_pause(self._conn, transport, paused_by, reason, seconds)

    def abort(self) -> None:
        self._conn.terminate()

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._conn.close(timeout=5)
