"""How a command reaches the database: one :class:`Store` opened for one action, closed after."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

from ..settings.config import Settings
from ..store import Store

T = TypeVar("T")


async def with_store(settings: Settings, action: Callable[[Any], Awaitable[T]], kind: type[Store] = Store) -> T:
    """Open a store (a ``kind``: Store, EventStore, ConsoleStore) on the configured database, run
    ``action`` on it, close it."""
    store = await kind.open(settings.require_database_url())
    try:
        return await action(store)
    finally:
        await store.close()


def run_with_store(settings: Settings, action: Callable[[Any], Awaitable[int]], kind: type[Store] = Store) -> int:
    """:func:`with_store` in a fresh event loop: a command's whole run; returns its exit code."""
    return int(anyio.run(with_store, settings, action, kind))
