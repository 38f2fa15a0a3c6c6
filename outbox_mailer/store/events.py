"""Delivery events and suppressions: what the webhook receiver, ``ingest-dsn`` and the CLI write and read."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from ..bounce_tags import BounceTag, Unproven
from ..delivery_events.model import ProviderEvent
from ..queries import sql
from .admin import Store


class EventStore(Store):
    """Events in, suppressions in and out; a small pool, like :class:`Store`."""

    async def record(self, event: ProviderEvent, recipient: str | None, suppress_for: str | None, *,
                     proof: BounceTag | Unproven = Unproven.UNTAGGED) -> tuple[int | None, bool]:
        """Match the event to its row and write it once. ``recipient``: its recipient's normal
        form; ``suppress_for``: the reason to suppress it for when the event is new (None: do not);
        ``proof``: what the envelope recipient of a bounce by mail proves (its tag names the row).
        Returns the matched row id (None: unmatched) and whether the event was new (a provider's
        retry of one already written is not)."""
        address, reason = recipient, suppress_for
        index = proof.index if isinstance(proof, BounceTag) else -1 if proof is Unproven.FORGED else None
        async with self._conn() as conn, conn.transaction():
            if isinstance(proof, BounceTag):
                delivery_id = await conn.fetchval(sql("tagged_delivery"), proof.delivery_id)
            else:
                delivery_id = await conn.fetchval(sql("match_delivery"), event.provider_message_id,
                                                  event.message_id, event.dedupe_key)
            new = await conn.fetchval(
                sql("record_event"), delivery_id, event.provider, event.provider_event_id, event.kind.value,
                event.bounce_class.value if event.bounce_class is not None else None, event.recipient,
                event.occurred_at, json.dumps(event.detail, default=str), address, reason, index)
        return delivery_id, bool(new)

    async def remember_token(self, provider: str, token: str, body: bytes) -> bool:
        """False when this single-use token came before with another body (a replay)."""
        async with self._conn() as conn:
            return bool(await conn.fetchval(sql("remember_token"), provider, token, hashlib.sha256(body).digest()))

    async def suppress(self, address: str, reason: str, source: str,
                       expires_at: datetime | None, *, actor: str | None = None) -> dict[str, Any]:
        """``actor``: also a row of email_operator_actions, in the same transaction (the console)."""
        async with self._conn() as conn, conn.transaction():
            row = dict(await conn.fetchrow(sql("suppress"), address, reason, source, expires_at))
            if actor is not None:
                detail = {"reason": reason, "expires_at": expires_at.isoformat() if expires_at else None}
                await conn.execute(sql("record_action"), actor, "suppress", None, address, json.dumps(detail))
            return row

    async def unsuppress(self, address: str, *, actor: str | None = None) -> bool:
        async with self._conn() as conn, conn.transaction():
            found = await conn.fetchval(sql("unsuppress"), address) is not None
            if found and actor is not None:
                await conn.execute(sql("record_action"), actor, "unsuppress", None, address, "{}")
            return found

    async def suppressions(self) -> list[dict[str, Any]]:
        async with self._conn() as conn:
            return [dict(r) for r in await conn.fetch(sql("suppressions"))]

    async def events_of(self, key: str) -> list[dict[str, Any]]:
        async with self._conn() as conn:
            return [{**dict(r), "detail": json.loads(r["detail"])} for r in await conn.fetch(sql("events_of"), key)]
