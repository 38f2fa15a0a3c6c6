"""The daemon's peak memory while it holds rows as large as the content limit allows.

    .venv/bin/python bench/held_memory.py [CONCURRENCY [ROWS [DELAY_MS]]]

A throwaway cluster; ROWS (60) rows, each with a 7.1 MB attachment (9.5 MiB of base64 in the row, just under
the default `OUTBOX_MAILER_MAX_MESSAGE_BYTES` of 10 MiB); one real CLI daemon (`python -m outbox_mailer run`)
at the default settings but `OUTBOX_MAILER_CONCURRENCY` (the default when not given) sends them to
``relay_sink.py``, which answers each message DELAY_MS (300) after its body, so the daemon holds all it may.
Prints the daemon's peak resident memory (VmHWM) once every row is sent: the figure docs/configuration.md
("Rows held in memory") and the systemd unit's memory cap are checked against.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import asyncpg

from common import free_port, rss_mb, wait_port
from outbox_mailer.devtools.pgcluster import TemporaryPostgres
from outbox_mailer.settings.config import Settings
from outbox_mailer.store import Store
from outbox_mailer.store.migrations import load_migrations

CONCURRENCY = int(sys.argv[1]) if len(sys.argv) > 1 else Settings.model_fields["concurrency"].default
ROWS = int(sys.argv[2]) if len(sys.argv) > 2 else 60
DELAY_MS = sys.argv[3] if len(sys.argv) > 3 else "300"
ATTACHMENT_BYTES = 7 * 1024 * 1024 + 100_000  # 9.5 MiB as base64
INSERT = """
INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, attachments)
VALUES ($1, ARRAY['to@example.com'], 'A large attachment', 'See the attachment.', $2::jsonb)
"""


async def main() -> None:
    blob = base64.b64encode(os.urandom(ATTACHMENT_BYTES)).decode()
    attachments = json.dumps([{"filename": "a.bin", "content_type": "application/octet-stream",
                               "content_base64": blob}])
    with TemporaryPostgres() as pg, tempfile.TemporaryDirectory() as work:
        store = await Store.open(pg.url)
        await store.migrate(load_migrations())
        await store.close()
        conn = await asyncpg.connect(pg.url)
        for i in range(ROWS):
            await conn.execute(INSERT, f"large-{i}", attachments)
        size = await conn.fetchval("SELECT max(content_bytes) FROM email_deliveries")
        port = free_port()
        bench = Path(__file__).parent
        sink = subprocess.Popen([sys.executable, str(bench / "relay_sink.py"), str(port), DELAY_MS,
                                 f"{work}/sink.json", "900"])
        wait_port(port)
        env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_MAILER_")}
        env.update(OUTBOX_MAILER_DATABASE_URL=pg.url, OUTBOX_MAILER_DEFAULT_FROM="bench@example.com",
                   OUTBOX_MAILER_SMTP__HOST="127.0.0.1", OUTBOX_MAILER_SMTP__PORT=str(port),
                   OUTBOX_MAILER_SMTP__TLS="none", OUTBOX_MAILER_CONCURRENCY=str(CONCURRENCY))
        with open(f"{work}/daemon.log", "wb") as log:
            daemon = subprocess.Popen([sys.executable, "-m", "outbox_mailer", "run"], env=env, stderr=log)
            started, sent, peak = time.monotonic(), 0, 0.0
            try:
                while sent < ROWS and time.monotonic() - started < 600:
                    peak = max(peak, rss_mb(daemon.pid)[1])
                    sent = await conn.fetchval("SELECT count(*) FROM email_deliveries WHERE status = 'sent'")
                    await asyncio.sleep(0.2)
                peak = max(peak, rss_mb(daemon.pid)[1])
            finally:
                daemon.send_signal(signal.SIGTERM)
                daemon.wait(60)
                sink.send_signal(signal.SIGTERM)
                sink.wait(60)
                await conn.close()
    print(f"concurrency {CONCURRENCY}: {sent} of {ROWS} rows of {size / 2**20:.1f} MiB sent in "
          f"{time.monotonic() - started:.1f} s; the daemon's peak RSS {peak:.0f} MB")


if __name__ == "__main__":
    asyncio.run(main())
