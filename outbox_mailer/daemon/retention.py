"""Retention: scrub the content of old final rows, delete older ones, and forget what only
the webhook receiver keeps (events that matched no row, Mailgun's tokens).

Works in batches of short transactions over partial indexes of final rows,
with ``SKIP LOCKED``, so pending rows and the daemon's claims are never held
up. The row of a scrubbed email stays, so its status and dedupe key remain
answerable; only bodies, attachments and custom headers go.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio

from ..errors import DatabaseError
from ..settings.config import PruneSettings
from ..store import SessionLimits, Store
from ..store.connection import settled

log = logging.getLogger("outbox_mailer")

DAY = 86_400.0
# A webhook token is remembered to refuse its reuse; a request signed more than
# delivery_events/mailgun.py's 5 minutes ago is refused by its timestamp, so a day is ample.
TOKEN_MEMORY_SECONDS = DAY


@dataclass
class PruneResult:
    scrubbed: int = 0
    deleted: int = 0
    unmatched_events: int = 0  # events that matched no row, deleted with the same delay as rows
    webhook_tokens: int = 0


Progress = Callable[[str, int, int], None]  # (phase, done, total)


async def prune(store: Store, settings: PruneSettings, progress: Progress | None = None,
                pause_between_batches: float = 0.0) -> PruneResult:
    """Scrub, then delete; returns the counts. ``progress`` is called after every batch."""
    scrub_after = settings.scrub_after_days * DAY
    delete_after = settings.delete_after_days * DAY
    to_scrub, to_delete = await store.count_prunable(scrub_after, delete_after) if progress else (0, 0)

    async def in_batches(step: Callable[[float, int], Awaitable[int]], older_than: float,
                         phase: str | None = None, total: int = 0) -> int:
        done = 0
        while True:
            # a batch is one short statement: a stop waits for it (store/connection.py, settled)
            n = await settled(step(older_than, settings.batch_size))
            if not n:
                break
            done += n
            if progress and phase:
                progress(phase, done, max(total, done))
            await anyio.sleep(pause_between_batches)
        return done

    return PruneResult(
        scrubbed=await in_batches(store.scrub_batch, scrub_after, "scrubbed", to_scrub),
        deleted=await in_batches(store.delete_batch, delete_after, "deleted", to_delete),
        unmatched_events=await in_batches(store.delete_unmatched_events, delete_after),
        webhook_tokens=await in_batches(store.forget_webhook_tokens, TOKEN_MEMORY_SECONDS),
    )


async def prune_periodically(url: str, settings: PruneSettings, limits: SessionLimits | None = None) -> None:
    """The daemon's retention task (``prune.interval_seconds``); runs until cancelled."""
    interval = settings.interval_seconds
    if interval is None:
        return
    while True:
        await anyio.sleep(interval)
        try:
            store = await Store.open(url, max_size=1, limits=limits)
            try:
                result = await prune(store, settings, pause_between_batches=0.01)
            finally:
                await settled(store.close())
        except DatabaseError as exc:
            log.warning("prune skipped: %s", exc)
            continue
        if result.scrubbed or result.deleted or result.unmatched_events or result.webhook_tokens:
            log.info("pruned: scrubbed=%d deleted=%d unmatched_events=%d webhook_tokens=%d", result.scrubbed,
                     result.deleted, result.unmatched_events, result.webhook_tokens)
