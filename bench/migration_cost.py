"""How long schema version 8 takes on a table that already holds ROWS emails (1,000,000).

    .venv/bin/python bench/migration_cost.py [ROWS]

A throwaway cluster migrated to version 7, ROWS rows of ~1.8 KB (98% sent, 1% failed, 1% pending),
then the time of `migrate` to the newest version: the table's lock is held for all of it, so
applications' INSERTs wait that long (docs/operations.md, "Upgrade").
"""

from __future__ import annotations

import asyncio
import sys
import time

from outbox_mailer.devtools.pgcluster import TemporaryPostgres
from outbox_mailer.store import Store
from outbox_mailer.store.migrations import load_migrations

ROWS = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
INSERT = """
INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, html_body, status, sent_at, attempts)
SELECT 'h' || g, ARRAY['u' || g || '@example.com'], 'Receipt ' || g, repeat('text body ', 90),
       '<p>' || repeat('html body ', 90) || '</p>',
       CASE g % 100 WHEN 0 THEN 'failed' WHEN 1 THEN 'pending' ELSE 'sent' END,
       CASE WHEN g % 100 > 1 THEN now() END, 1
FROM generate_series(1, {rows}) g
"""


async def main() -> None:
    with TemporaryPostgres() as pg:
        store = await Store.open(pg.url)
        migrations = load_migrations()
        await store.migrate([m for m in migrations if m.version <= 7])
        await store.run_script([INSERT.format(rows=ROWS), "ANALYZE email_deliveries"])
        started = time.monotonic()
        applied = await store.migrate(migrations)
        elapsed = time.monotonic() - started
        await store.close()
    print(f"rows={ROWS} migrated={[m.version for m in applied]} seconds={elapsed:.1f}")


if __name__ == "__main__":
    asyncio.run(main())
