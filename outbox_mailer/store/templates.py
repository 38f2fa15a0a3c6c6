"""Stored templates in SQL (schema 27): listed and read by the CLI and the console (:class:`TemplateReads`),
added by the CLI (:class:`TemplateStore`), and read by the daemon through :class:`TemplateSources`, a bounded
cache in front of a connection opened at the first row that names a template (plain rows never open it).

A version is immutable (the schema refuses UPDATE and DELETE), so a cached version never goes stale and is
fetched once per process, by (name, locale, version), never joined into the claim.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import anyio
import asyncpg

from ..errors import NotFound
from ..templating.render import TemplateVersion
from .admin import Store
from .connection import SessionLimits
from .queries import sql

__all__ = ["TemplateReads", "TemplateSources", "TemplateStore"]


def _version(row: Any) -> TemplateVersion:
    return TemplateVersion(row["name"], row["locale"], row["version"], row["subject"], row["text_body"],
                           row["html_body"])


class TemplateReads(Store):
    """What reads templates: the list, the version a row would render, one version by its key."""

    async def templates(self) -> list[dict[str, Any]]:
        async with self._conn() as conn:
            return [dict(r) for r in await conn.fetch(sql("list_templates"))]

    async def template(self, name: str, locale: str | None, version: int | None) -> TemplateVersion:
        """The version a row naming ``name`` with ``locale`` and ``version`` would render (the INSERT's
        resolution); NotFound naming what is missing when there is none."""
        async with self._conn() as conn:
            try:
                resolved = await conn.fetchrow(sql("resolve_template"), name, locale, version)
            except asyncpg.CheckViolationError as exc:
                raise NotFound(name, exc.message.partition(": ")[2]) from exc
            assert resolved is not None  # the function raises rather than return nothing
            row = await conn.fetchrow(sql("template_version"), name, resolved["locale"], resolved["version"])
        return _version(row)

    async def template_version(self, name: str, locale: str, version: int) -> TemplateVersion | None:
        async with self._conn() as conn:
            row = await conn.fetchrow(sql("template_version"), name, locale, version)
        return None if row is None else _version(row)


class TemplateStore(TemplateReads):
    """The CLI's template statements: the reads, and a version added."""

    async def add_template(self, name: str, locale: str, subject: str, text_body: str | None,
                           html_body: str | None, created_by: str) -> dict[str, Any]:
        async with self._conn() as conn:
            row = await conn.fetchrow(sql("add_template"), name, locale, subject, text_body, html_body, created_by)
        return dict(row) if row is not None else {}


class TemplateSources:
    """The daemon's template versions: at most ``size`` kept, least recently used dropped first."""

    def __init__(self, url: str, size: int, limits: SessionLimits | None = None) -> None:
        self._url = url
        self._size = size
        self._limits = limits
        self._cache: OrderedDict[tuple[str, str, int], TemplateVersion] = OrderedDict()
        self._store: TemplateStore | None = None
        self._opening = anyio.Lock()

    async def get(self, name: str, locale: str, version: int) -> TemplateVersion | None:
        """The version, from memory or else from the database; None when it does not exist."""
        key = (name, locale, version)
        found = self._cache.get(key)
        if found is not None:
            self._cache.move_to_end(key)
            return found
        async with self._opening:
            if self._store is None:
                opened = await TemplateStore.open(self._url, max_size=1, limits=self._limits)
                assert isinstance(opened, TemplateStore)  # Store.open makes its own class
                self._store = opened
            store = self._store
        found = await store.template_version(name, locale, version)
        if found is not None:
            self._cache[key] = found
            if len(self._cache) > self._size:
                self._cache.popitem(last=False)
        return found

    async def close(self) -> None:
        if self._store is not None:
            await self._store.close()
            self._store = None
