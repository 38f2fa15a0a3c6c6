"""Delivery events and suppressions: what the webhook receiver, ``ingest-dsn`` and the CLI write and read."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from ..delivery_events.model import ProviderEvent
from ..queries import sql
from .admin import Store


class EventStore(Store):
    """Events in, suppressions in and out; a small pool, like :class:`Store`."""

    async def record(self, event: ProviderEvent, recipient: str | None,
                     suppress_for: str | None) -> tuple[int | None, bool]:
        """Match the event to its row and write it once. ``recipient``: its recipient's normal
        form; ``suppress_for``: the reason to suppress it for when the event is new (None: do not).
        Returns the matched row id (None: unmatched) and whether the event was new (a provider's
        retry of one already written is not)."""
        address, reason = recipient, suppress_for
        async with self._conn() as conn, conn.transaction():
            delivery_id = await conn.fetchval(sql("match_delivery"), event.provider_message_id, event.message_id,
                                              event.dedupe_key)
            new = await conn.fetchval(
                sql("record_event"), delivery_id, event.provider, event.provider_event_id, event.kind.value,
                event.bounce_class.value if event.bounce_class is not None else None, event.recipient,
                event.occurred_at, json.dumps(event.detail, default=str), address, reason)
        return delivery_id, bool(new)

    async def remember_token(self, provider: str, token: str, body: bytes) -> bool:
        """False when this single-use token came before with another body (a replay)."""
        async with self._conn() as conn:
            return bool(await conn.fetchval(sql("remember_token"), provider, token, hashlib.sha256(body).digest()))

    async def suppress(self, address: str, reason: str, source: str, expires_at: datetime | None) -> dict[str, Any]:
        async with self._conn() as conn:
            return dict(await conn.fetchrow(sql("suppress"), address, reason, source, expires_at))

    async def unsuppress(self, address: str) -> bool:
        async with self._conn() as conn:
            return await conn.fetchval(sql("unsuppress"), address) is not None

    async def suppressions(self) -> list[dict[str, Any]]:
        async with self._conn() as conn:
            return [dict(r) for r in await conn.fetch(sql("suppressions"))]

    async def events_of(self, key: str) -> list[dict[str, Any]]:
        async with self._conn() as conn:
            return [{**dict(r), "detail": json.loads(r["detail"])} for r in await conn.fetch(sql("events_of"), key)]
