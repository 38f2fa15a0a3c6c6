"""PostgreSQL's CPU per email for the two hot statements alone: claim_due + record_outcomes.

    .venv/bin/python bench/statement_cost.py [ROWS [BATCH [plain|template|provider]]]

A throwaway cluster, ROWS (20,000) pending rows with ~1.6 KB bodies, then one
connection claims BATCH (100) at a time and records each batch as sent, as the daemon
does, without the daemon. Prints the backend's CPU (user + system, from
/proc/PID/schedstat) per row, for the whole loop and for the claim alone, and the WAL the loop wrote per row
(pg_current_wal_lsn() before and after); and the application's
side, which work moved out of the hot statements may land on: the CPU of an INSERT of
one row in its own transaction, measured over the first INSERTED (1,000) rows, each
inserted so (the rest are inserted in one statement). ``template``: the rows name a stored template
(docs/templates.md) with ~1.6 KB of data instead of giving their own subject and bodies; ``provider``: they name
a provider's template with a model of that size. To compare two
checkouts, run it from each in turn, alternating, on the same machine:
``PYTHONPATH=OTHER_CHECKOUT .venv/bin/python bench/statement_cost.py``
(older checkouts' record_outcomes took ``defer_release``; it is passed when present).
The figures swing by 10-20% between runs on a shared machine: compare medians.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import asyncpg

from outbox_mailer.decide import RetryPolicy, decide
from outbox_mailer.delivery import Outcome
from outbox_mailer.devtools.pgcluster import TemporaryPostgres
from outbox_mailer.store import AttemptRecord, ClaimSession, OutcomeWrite, Store
from outbox_mailer.store.migrations import load_migrations

ROWS = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
BATCH = int(sys.argv[2]) if len(sys.argv) > 2 else 100  # a realistic daemon claims a few rows at a time
INSERTED = min(ROWS, 1_000)
INSERT = """
INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, html_body)
SELECT 'k' || g, ARRAY['user' || g || '@example.com'], 'Subject ' || g, repeat('text body ', 80),
       '<p>' || repeat('html body ', 80) || '</p>'
FROM generate_series($1::int, $2::int) g
"""
KIND = sys.argv[3] if len(sys.argv) > 3 else "plain"
TEMPLATE_INSERT = """
INSERT INTO email_deliveries (dedupe_key, to_addresses, template, template_data, locale)
SELECT 'k' || g, ARRAY['user' || g || '@example.com'], 'bench',
       jsonb_build_object('n', g, 'text', repeat('text body ', 80), 'html', repeat('html body ', 80)), 'en-GB'
FROM generate_series($1::int, $2::int) g
"""
PROVIDER_INSERT = """
INSERT INTO email_deliveries (dedupe_key, to_addresses, provider_template, template_data)
SELECT 'k' || g, ARRAY['user' || g || '@example.com'], 'bench-alias',
       jsonb_build_object('n', g, 'text', repeat('text body ', 80), 'html', repeat('html body ', 80))
FROM generate_series($1::int, $2::int) g
"""
ADD_TEMPLATE = """
INSERT INTO email_templates (name, locale, version, subject, text_body, html_body, created_by)
VALUES ('bench', 'en', 1, 'Subject {{ n }}', '{{ text }}', '<p>{{ html }}</p>', 'bench')
"""


def cpu_seconds(pid: int) -> float:
    """The process's time on a CPU (user + system), to the nanosecond (/proc/PID/stat counts 10 ms ticks)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


async def main() -> None:
    with TemporaryPostgres() as pg:
        store = await Store.open(pg.url)
        await store.migrate(load_migrations())
        await store.close()
        app = await asyncpg.connect(pg.url)
        app_pid = await app.fetchval("SELECT pg_backend_pid()")
        insert = INSERT
        if KIND == "template":
            await app.execute(ADD_TEMPLATE)
            insert = TEMPLATE_INSERT
        elif KIND == "provider":
            insert = PROVIDER_INSERT
        before = cpu_seconds(app_pid)
        for g in range(1, INSERTED + 1):
            await app.execute(insert, g, g)
        insert_cpu = cpu_seconds(app_pid) - before
        await app.execute(insert, INSERTED + 1, ROWS)
        await app.execute("ANALYZE email_deliveries")
        await app.close()
        session = await ClaimSession.open(pg.url)
        pid = await session._conn.fetchval("SELECT pg_backend_pid()")
        extra = {"defer_release": True} if "defer_release" in inspect.signature(session.record_outcomes).parameters else {}
        policy, claim_cpu, rows = RetryPolicy(), 0.0, 0
        started_cpu, started = cpu_seconds(pid), time.monotonic()
        started_lsn = await session._conn.fetchval("SELECT pg_current_wal_lsn()")
        while True:
            before = cpu_seconds(pid)
            batch = await session.claim_due(BATCH, "bench")
            claim_cpu += cpu_seconds(pid) - before
            if not batch:
                break
            now = datetime.now(UTC)
            sent = Outcome.sent("q")
            await session.record_outcomes([
                OutcomeWrite(d, decide(d, sent, now, policy, 0.5),
                             AttemptRecord(d.attempts, now, now, sent.kind, 250, None, None, "smtp", "bench"))
                for d in batch], **extra)
            rows += len(batch)
        total = cpu_seconds(pid) - started_cpu
        wal = await session._conn.fetchval("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1)", started_lsn)
        await session.close()
    print(f"rows={rows} postgres_cpu_us_per_row={total / rows * 1e6:.1f} claim_us_per_row={claim_cpu / rows * 1e6:.1f} "
          f"rows_per_s={rows / (time.monotonic() - started):.0f} "
          f"insert_us_per_row={insert_cpu / INSERTED * 1e6:.1f} wal_bytes_per_row={float(wal) / rows:.0f}")


if __name__ == "__main__":
    asyncio.run(main())
