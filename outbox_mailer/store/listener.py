"""A connection that LISTENs on the insert trigger's channel (the claim loop's wake-up)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import asyncpg

from .connection import CHANNEL, SessionLimits, connect, translate_errors


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
