"""The application's INSERT under two schema versions, in lockstep: what a migration does to the user's database.

    .venv/bin/python bench/insert_schemas.py [ROWS [ROUNDS [BEFORE [AFTER [BATCH]]]]]

One throwaway cluster with fsync and synchronous commit on, as ``bench/run.py``'s; one database migrated to
schema BEFORE (default: the one before the newest), one to AFTER (default: the newest). Per round, a fresh
connection to each, 100 warm-up statements each, then ROWS (2,000) receipts (``receipts.py``, the bench's
1.8 KB emails) inserted BATCH (1) rows per statement in its own transaction, a statement of one database then the
same statement of the other: the machine's drift, which moves single runs by 10-20 % here, hits both alike.
Prints each backend's CPU per row for every round, and the medians over ROUNDS (3). The statement is the
``INSERT ... VALUES ... ON CONFLICT (dedupe_key) DO NOTHING`` of the README for one row, the bench's
``INSERT ... SELECT FROM unnest(...)`` for several.
"""

from __future__ import annotations

import asyncio
import statistics
import sys

import asyncpg

import receipts
from outbox_mailer.devtools.pgcluster import TemporaryPostgres
from outbox_mailer.store import Store
from outbox_mailer.store.migrations import load_migrations
from statement_cost import cpu_seconds

NEWEST = max(m.version for m in load_migrations())
ROWS = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
BEFORE = int(sys.argv[3]) if len(sys.argv) > 3 else NEWEST - 1
AFTER = int(sys.argv[4]) if len(sys.argv) > 4 else NEWEST
BATCH = int(sys.argv[5]) if len(sys.argv) > 5 else 1
WARM_UP = 100
ONE_ROW = """
INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, html_body, metadata, transport)
VALUES ($1, ARRAY[$2], $3, $4, $5, $6::jsonb, $7) ON CONFLICT (dedupe_key) DO NOTHING
"""


def arguments(prefix: str, first: int) -> tuple[object, ...]:
    cols = receipts.columns(prefix, first, BATCH)
    return (*cols, None) if BATCH > 1 else (*(c[0] for c in cols), None)


async def main() -> None:
    statement = receipts.INSERT_SQL if BATCH > 1 else ONE_ROW
    names = {f"schema_{BEFORE}": BEFORE, f"schema_{AFTER}": AFTER}
    figures: dict[str, list[float]] = {name: [] for name in names}
    with TemporaryPostgres(fast=False) as pg:
        base = pg.url.rsplit("/", 1)[0]
        admin = await asyncpg.connect(pg.url)
        try:
            for name, version in names.items():
                await admin.execute(f"CREATE DATABASE {name}")
                store = await Store.open(f"{base}/{name}")
                await store.migrate([m for m in load_migrations() if m.version <= version])
                await store.close()
        finally:
            await admin.close()
        for rnd in range(ROUNDS):
            conns = {name: await asyncpg.connect(f"{base}/{name}") for name in names}
            try:
                pids = {name: await conn.fetchval("SELECT pg_backend_pid()") for name, conn in conns.items()}
                for conn in conns.values():
                    for i in range(0, WARM_UP * BATCH, BATCH):
                        await conn.execute(statement, *arguments(f"w{rnd}-", i))
                spent = dict.fromkeys(names, 0.0)
                for i in range(0, ROWS, BATCH):
                    for name, conn in conns.items():
                        before = cpu_seconds(pids[name])
                        await conn.execute(statement, *arguments(f"r{rnd}-", i))
                        spent[name] += cpu_seconds(pids[name]) - before
                for name in names:
                    figures[name].append(spent[name] / ROWS * 1e6)
            finally:
                for conn in conns.values():
                    await conn.close()
    print(f"{ROWS:,} rows, {BATCH} per INSERT, {ROUNDS} rounds in lockstep; PostgreSQL CPU per row:")
    for name, values in figures.items():
        print(f"  {name:10s} {' '.join(f'{v:6.1f}' for v in values)}  median {statistics.median(values):6.1f} µs")


if __name__ == "__main__":
    asyncio.run(main())
