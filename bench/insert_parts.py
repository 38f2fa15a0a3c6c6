"""Where the application's INSERT spends PostgreSQL's CPU: parts of its path taken away, in scratch databases.

    .venv/bin/python bench/insert_parts.py [ROWS [ROUNDS]]

One throwaway cluster with fsync and synchronous commit on, as ``bench/run.py``'s. Per round, for each
variant in turn: a fresh database copied from a migrated template, the variant's changes (a trigger
disabled, indexes dropped), 100 warm-up rows, then ROWS (1,500) receipts-like rows inserted one per
transaction, as a web request that sends one email does. Prints the backend's CPU per row for every
round and the median over ROUNDS (3). What a part costs is the baseline's figure minus the variant's.
The variants without the triggers leave rows without their queue row or content checks: they measure,
they are not a way to run. Nothing here changes the schema of a real database.
"""

from __future__ import annotations

import asyncio
import statistics
import sys

import asyncpg

from outbox_mailer.devtools.pgcluster import TemporaryPostgres
from outbox_mailer.store import Store
from outbox_mailer.store.migrations import load_migrations
from statement_cost import cpu_seconds

ROWS = int(sys.argv[1]) if len(sys.argv) > 1 else 1_500
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
WARM_UP = 100
INSERT = """
INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, html_body)
VALUES ($1, ARRAY[$1 || '@example.com'], 'Your receipt ' || $1, repeat('text body ', 80),
        '<p>' || repeat('html body ', 80) || '</p>')
"""
CHECK = "ALTER TABLE email_deliveries DISABLE TRIGGER email_deliveries_check_content"
QUEUE = "ALTER TABLE email_deliveries DISABLE TRIGGER email_deliveries_notify_insert"
RECIPIENTS = "DROP INDEX email_deliveries_recipients_idx"
BY_AGE = ["DROP INDEX email_deliveries_created_idx", "DROP INDEX email_deliveries_unscrubbed_idx"]
VARIANTS: dict[str, list[str]] = {
    "as migrated": [],
    "without the content trigger": [CHECK],
    "without the queue row's trigger": [QUEUE],
    "without the recipients' GIN index": [RECIPIENTS],
    "without the two created_at indexes": BY_AGE,
    "without all of these": [CHECK, QUEUE, RECIPIENTS, *BY_AGE],
}


async def per_row(url: str, changes: list[str]) -> float:
    conn = await asyncpg.connect(url)
    try:
        for change in changes:
            await conn.execute(change)
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        for i in range(WARM_UP):
            await conn.execute(INSERT, f"warm{i}")
        before = cpu_seconds(pid)
        for i in range(ROWS):
            await conn.execute(INSERT, f"k{i}")
        return (cpu_seconds(pid) - before) / ROWS * 1e6
    finally:
        await conn.close()


async def main() -> None:
    with TemporaryPostgres(fast=False) as pg:
        store = await Store.open(pg.url)
        await store.migrate(load_migrations())
        await store.close()
        admin = await asyncpg.connect(pg.url)
        await admin.execute("CREATE DATABASE insert_parts_template TEMPLATE postgres")
        figures: dict[str, list[float]] = {name: [] for name in VARIANTS}
        try:
            for rnd in range(ROUNDS):
                for n, (name, changes) in enumerate(VARIANTS.items()):
                    db = f"insert_parts_{rnd}_{n}"
                    await admin.execute(f"CREATE DATABASE {db} TEMPLATE insert_parts_template")
                    figures[name].append(await per_row(pg.url.rsplit("/", 1)[0] + "/" + db, changes))
        finally:
            await admin.close()
    for name, values in figures.items():
        print(f"{name:36s} {' '.join(f'{v:6.1f}' for v in values)}  median {statistics.median(values):6.1f} µs per row")


if __name__ == "__main__":
    asyncio.run(main())
