"""The store with two test-only doors: arbitrary SQL, for arranging and inspecting rows."""

from __future__ import annotations

from typing import Any

from outbox_mailer.store import Store


class SqlStore(Store):
    async def execute(self, statement: str, *args: Any) -> str:
        async with self._conn() as conn:
            return await conn.execute(statement, *args)

    async def fetch(self, statement: str, *args: Any) -> list[dict[str, Any]]:
        async with self._conn() as conn:
            return [dict(r) for r in await conn.fetch(statement, *args)]
