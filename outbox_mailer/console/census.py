"""What the console can only learn by reading a whole table: rows by status and transport, which rows
are in doubt, and the attempts and delivery events of the last hour and week behind the overview's
charts and rates.

No index of email_deliveries may name status (the daemon changes it with every email), so these
are one scan of the table and one of the week's attempts. The console makes them at most once per
``CENSUS_SECONDS`` while it is used (0: on every request), in the background: a page reads the last
census at once and says when it was taken, and the first page after a quiet spell starts the next.
What is live on every request is cheap: the queue (pending and sending rows), the oldest due row,
the held transports (``ConsoleStore.live``). An operator's action asks for a new census.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..store.console import ConsoleStore

log = logging.getLogger("outbox_mailer")
MAX_IN_DOUBT_IDS = 10_000  # the newest; the in-doubt page and filter list these
WEEK = 7 * 86_400


@dataclass(frozen=True, slots=True)
class Snapshot:
    counts: list[dict[str, Any]]  # status, transport, n
    in_doubt_ids: list[int]
    minutes: list[dict[str, Any]]  # bucket, sent, failed: per minute over the last hour
    hours: list[dict[str, Any]]  # per hour over the last 7 days
    rates: dict[str, Any]  # sent, bounces, hard_bounces, complaints over the last 7 days
    taken_at: datetime


@dataclass
class Census:
    store: ConsoleStore
    default_transport: str
    interval: float
    clock: Any = time.monotonic
    _snapshot: Snapshot | None = None
    _taken: float = 0.0
    _running: asyncio.Task[None] | None = None
    _expired: bool = False
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def read(self) -> Snapshot:
        """The last census; a new one first when there is none yet (or CENSUS_SECONDS is 0), else one is
        started in the background when this one is older than the interval or was expired."""
        stale = self._expired or self.clock() - self._taken >= self.interval
        if self._snapshot is None and self._running is not None:
            await self._running  # the first census, started with the console
        if self._snapshot is None or (stale and self.interval == 0):
            await self._take()
        elif stale and self._running is None:
            self._running = asyncio.get_running_loop().create_task(self._take_in_background())
        assert self._snapshot is not None
        return self._snapshot

    def start(self) -> None:
        """Take the first census in the background (the console starts it as it starts listening)."""
        if self._running is None:
            self._running = asyncio.get_running_loop().create_task(self._take_in_background())

    async def stop(self) -> None:
        """Cancel a census under way (the console is stopping)."""
        if self._running is not None:
            self._running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._running

    def expire(self) -> None:
        """Something changed (an operator's action): the next read starts a new census."""
        self._expired = True

    async def _take(self) -> None:
        async with self._lock:
            self._expired = False
            started = self.clock()
            counts = await self.store.census(self.default_transport, MAX_IN_DOUBT_IDS)
            ids = [i for c in counts if c["in_doubt_ids"] for i in c["in_doubt_ids"]]
            self._snapshot = Snapshot(
                counts=[{k: c[k] for k in ("status", "transport", "n")} for c in counts],
                in_doubt_ids=sorted(ids, reverse=True)[:MAX_IN_DOUBT_IDS],
                minutes=await self.store.outcomes(60, 3600), hours=await self.store.outcomes(3600, WEEK),
                rates=await self.store.event_rates(WEEK), taken_at=datetime.now(UTC))
            self._taken = self.clock()
            log.debug("console: census took %.3f s", self._taken - started)

    async def _take_in_background(self) -> None:
        try:
            await self._take()
        except Exception as exc:  # noqa: BLE001  (the database away for a moment: the next read tries again
            log.warning("console: census failed: %s", exc)
        finally:
            self._running = None
