"""Delivery events and suppressions: what the webhook receiver, ``ingest-dsn`` and the CLI write and read;
and, on the daemon's claim session, the suppressions of claimed rows and the events that came before
their outcome."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg

from ..delivery import Delivery
from ..delivery_events.bounce_tags import BounceTag, Unproven
from ..delivery_events.model import BounceClass, Kind, ProviderEvent
from ..delivery_events.suppression import (
    addresses_to_check,
    categories_to_check,
    event_counts,
    form_or_none,
    suppression_for,
    with_suppressed,
)
from .admin import Store
from .connection import one
from .queries import sql
from .rows import delivery_from_row


async def screened(conn: asyncpg.Connection, rows: Sequence[asyncpg.Record], max_content_bytes: int) -> list[Delivery]:
    """Claimed rows, each with its recipients suppressed now: one look-up for the whole batch, in the
    normal form computed here (suppression.py), and none when nothing is suppressed."""
    deliveries = [delivery_from_row(r, max_content_bytes) for r in rows]
    checked = [d for d, r in zip(deliveries, rows, strict=True) if r["screen_suppressions"]]
    addresses = addresses_to_check(checked)
    if not addresses:
        return deliveries
    found = [(r["address"], r["scope"], r["noted"])
             for r in await conn.fetch(sql("suppressions_among"), addresses, categories_to_check(checked))]
    by_id = {d.id: d for d in with_suppressed(checked, found)}
    return [by_id.get(d.id, d) for d in deliveries]


async def adopt_waiting_events(conn: asyncpg.Connection, outcomes: Sequence[tuple[int, str | None, str | None]],
                               automatic: bool) -> int:
    """Match the events that quoted these outcomes (row id, provider's message id, Message-ID) before
    they were written, and apply them as if they had come now (``automatic``: hard bounces and
    complaints suppress). Returns how many."""
    if not outcomes:
        return 0
    ids, provider_ids, message_ids = (list(c) for c in zip(*outcomes, strict=True))
    async with conn.transaction():
        waiting = await conn.fetch(sql("waiting_events"), ids, provider_ids, message_ids)
        effects = []
        for e in waiting:
            address = form_or_none(e["recipient"]) if e["recipient"] is not None else None
            bounce = BounceClass(e["bounce_class"]) if e["bounce_class"] is not None else None
            effects.append((e["id"], e["delivery_id"], event_counts(e["provider"], e["delivery_id"], address,
                                                                   e["recipients"]),
                            address, suppression_for(Kind(e["kind"]), bounce, automatic) if address else None))
        if effects:
            await conn.execute(sql("apply_events"), *(list(c) for c in zip(*effects, strict=True)))
    return len(effects)


class EventStore(Store):
    """Events in, suppressions in and out; a small pool, like :class:`Store`."""

    async def record(self, event: ProviderEvent, recipient: str | None, suppress_for: str | None, *,
                     proof: BounceTag | Unproven = Unproven.UNTAGGED) -> tuple[int | None, bool]:
        """Match the event to its row and write it once. ``recipient``: its recipient's normal
        form; ``suppress_for``: the reason to suppress it for when the event is new (None: do not);
        ``proof``: what the envelope recipient of a bounce by mail proves (its tag names the row).
        Returns the matched row id (None: unmatched) and whether the event was new (a provider's
        retry of one already written is not)."""
        async with self._conn() as conn, conn.transaction():
            if isinstance(proof, BounceTag):  # the tag names the row: nothing else could match better
                match = await conn.fetchrow(sql("tagged_delivery"), proof.delivery_id)
            else:
                match = await conn.fetchrow(sql("match_delivery"), event.provider_message_id, event.message_id,
                                            event.dedupe_key)
            delivery_id = match["delivery_id"] if match is not None else None
            unmatched = delivery_id is None  # it keeps the ids it quotes, to be matched when its outcome lands
            event_id = await conn.fetchval(
                sql("record_event"), delivery_id, event.provider, event.provider_event_id, event.kind.value,
                event.bounce_class.value if event.bounce_class is not None else None, event.recipient,
                event.occurred_at, json.dumps(event.detail, default=str),
                event.provider_message_id if unmatched else None, event.message_id if unmatched else None)
            if event_id is not None:
                recipients = (match["recipients"] if match is not None else None) or ()
                counts = event_counts(event.provider, delivery_id, recipient, recipients, proof)
                await conn.execute(sql("apply_events"), [event_id], [delivery_id], [counts], [recipient],
                                   [suppress_for])
        return delivery_id, event_id is not None

    async def remember_token(self, provider: str, token: str, body: bytes) -> bool:
        """False when this single-use token came before with another body (a replay)."""
        async with self._conn() as conn:
            return bool(await conn.fetchval(sql("remember_token"), provider, token, hashlib.sha256(body).digest()))

    async def suppress(self, address: str, reason: str, source: str, expires_at: datetime | None,
                       scope: str = "") -> dict[str, Any]:
        """Suppress ``address`` (normal form) for all mail (``scope`` '') or for one category."""
        async with self._conn() as conn:
            return dict(one(await conn.fetchrow(sql("suppress"), address, reason, source, expires_at, scope)))

    async def unsubscribe(self, address: str, category: str, delivery_id: int) -> bool:
        """A one-click unsubscribe written once; False when that address had left that category already."""
        async with self._conn() as conn:
            return bool(await conn.fetchval(sql("unsubscribe"), address, category, delivery_id))

    async def unsuppress(self, address: str, scope: str = "") -> bool:
        async with self._conn() as conn:
            return await conn.fetchval(sql("unsuppress"), address, scope) is not None

    async def suppressions(self) -> list[dict[str, Any]]:
        async with self._conn() as conn:
            return [dict(r) for r in await conn.fetch(sql("suppressions"))]

    async def trace_of(self, delivery_id: int) -> tuple[str, str | None] | None:
        """The dedupe key and traceparent of a row (None: no such row any more)."""
        async with self._conn() as conn:
            row = await conn.fetchrow(sql("delivery_trace"), delivery_id)
        return None if row is None else (row["dedupe_key"], row["traceparent"])

    async def events_of(self, key: str) -> list[dict[str, Any]]:
        async with self._conn() as conn:
            return [{**dict(r), "detail": json.loads(r["detail"])} for r in await conn.fetch(sql("events_of"), key)]
