"""The transports' shared limits as PostgreSQL keeps them (sql/0011_shared_limits.sql).

:class:`LimitStore` opens its small pool on first use, so a daemon whose transports have no
limit never connects for it. Its callers are quotas.py (grants, throttling) and ``stats``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import anyio

from .admin import Store
from .connection import one
from .queries import sql

TIMEOUT_SECONDS = 10.0  # a grant waits this long at most (a stuck lock, a half-open connection)


@dataclass(frozen=True, slots=True)
class Grant:
    """What one call of email_take_capacity granted (see the function's comment)."""

    requests: int
    first_in: float  # seconds from the grant until the first request slot is due, less the tolerance
    spacing: float  # seconds between request slots at the rate in force (0: no rate limit)
    recipients: int
    slot: datetime | None  # the usage slot the recipients are counted in (to give back unused ones)
    slot_left: float  # seconds until that slot ends: the recipients must be used by then
    used: int  # recipients counted in the window, this grant's included
    free_in: float | None  # short of recipients: seconds until the oldest counted slot leaves the window
    rate: float | None  # requests per second in force (None: no rate limit)
    throttles: int  # times throttling lowered the shared rate, by any daemon


@dataclass(frozen=True, slots=True)
class Throttled:
    share: float  # the share of RATE_PER_SECOND now in force
    lowered: bool  # this report lowered it (False: another one did, less than the cooldown ago)


class LimitStore:
    """On its own pool, opened on first use (the daemon); or on a caller's open ``store``, which
    it leaves open (``stats``)."""

    def __init__(self, url: str = "", *, store: Store | None = None) -> None:
        self._url = url
        self._store = store
        self._owned = store is None
        self._opening = anyio.Lock()

    async def _open(self) -> Store:
        async with self._opening:
            if self._store is None:
                self._store = await Store.open(self._url, max_size=2)
            return self._store

    async def close(self) -> None:
        if self._store is not None and self._owned:
            await self._store.close()
            self._store = None

    async def take_capacity(self, transport: str, *, rate: float | None, burst: int, requests: int,
                            horizon: float, daily_limit: int | None, window: float, recipients: int,
                            returned: int = 0, returned_slot: datetime | None = None,
                            recovery: float) -> Grant:
        async with (await self._open())._conn() as conn:
            row = one(await conn.fetchrow(sql("take_capacity"), transport, rate, burst, requests, horizon,
                                          daily_limit, window, recipients, returned, returned_slot, recovery,
                                          timeout=TIMEOUT_SECONDS))
        return Grant(row["requests"], row["first_in"], row["spacing"], int(row["recipients"]),
                     row["slot"] if row["recipients"] else None, row["slot_left"], int(row["used"]), row["free_in"],
                     row["rate"], int(row["throttles"]))

    async def throttle(self, transport: str, *, factor: float, min_share: float, hold: float, recovery: float,
                       cooldown: float) -> Throttled:
        async with (await self._open())._conn() as conn:
            row = one(await conn.fetchrow(sql("throttle_transport"), transport, factor, min_share, hold, recovery,
                                          cooldown, timeout=TIMEOUT_SECONDS))
        return Throttled(row["rate_share"], row["lowered"])

    async def transport_use(self, recovery: float, windows: Mapping[str, float]) -> list[dict[str, Any]]:
        """Each transport with a row in email_transport_limits: its rate share, throttles, and the
        requests and recipients granted within its window."""
        async with (await self._open())._conn() as conn:
            rows = await conn.fetch(sql("transport_use"), recovery, json.dumps(dict(windows)))
        return [dict(r) for r in rows]
