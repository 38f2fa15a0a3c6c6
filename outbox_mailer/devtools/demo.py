"""``outbox-mailer demo``: the whole path on this machine, with nothing but the install.

Starts a throwaway PostgreSQL and an in-process SMTP sink, migrates, commits
sample emails in one transaction (plus one in a transaction that is rolled
back, and a duplicate dedupe key), runs the daemon until every row is final,
prints a status table and cleans up.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import anyio
from pydantic import SecretStr

from ..daemon.service import Daemon
from ..daemon.transport_factory import probe_sender
from ..settings.config import RetrySettings, Settings
from ..settings.transports import SmtpSettings
from ..store import Store
from ..store.migrations import load_migrations
from ..transports.smtp import SmtpTransport
from .pgcluster import TemporaryPostgres
from .sink import SmtpSink, always_refuse, combine, fail_first

COMMITTED = """
BEGIN;
INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body)
VALUES ('welcome-ada', ARRAY['Ada Lovelace <ada@example.com>'], 'Welcome, Ada', 'Your account is ready.');
INSERT INTO email_deliveries (dedupe_key, to_addresses, cc_addresses, bcc_addresses, subject, text_body, html_body)
VALUES ('invoice-1042', ARRAY['Zoë Müller <zoe@example.com>'], ARRAY['billing@example.org'],
        ARRAY['archive@example.org'], 'Rechnung Nr. 1042 – danke schön', 'Total: 12.00 EUR',
        '<p>Total: <b>12.00 EUR</b></p>');
INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, attachments)
VALUES ('report-weekly', ARRAY['ops@example.com'], 'Weekly report', 'Attached.',
        '[{"filename": "report.csv", "content_type": "text/csv", "content_base64": "ZGF5LHNlbnQKbW9uLDQyCg=="}]');
INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body)
VALUES ('bounce-permanent', ARRAY['nobody@example.com'], 'This address does not exist', 'Refused with 550.');
INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body)
VALUES ('greylisted-once', ARRAY['busy@example.com'], 'Greylisted', 'Refused once with 451, then accepted.');
-- the same dedupe key again: the application's retry of its own request; ignored
INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body)
VALUES ('welcome-ada', ARRAY['ada@example.com'], 'Welcome again?', 'Never sent twice.')
ON CONFLICT (dedupe_key) DO NOTHING;
COMMIT;
"""

ROLLED_BACK = """
BEGIN;
INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body)
VALUES ('rolled-back', ARRAY['ada@example.com'], 'Order confirmed', 'The order failed; this must never be sent.');
ROLLBACK;
"""

KEYS = ["welcome-ada", "invoice-1042", "report-weekly", "bounce-permanent", "greylisted-once", "rolled-back"]


def say(text: str) -> None:
    print(text, flush=True)


async def run_demo(timeout_seconds: float = 60.0) -> int:
    rules = combine(
        always_refuse("nobody@", 550, "5.1.1 <nobody@example.com>: no such user"),
        fail_first(1, "busy@", 451, "4.7.1 greylisted, try again later"),
    )
    say("starting a throwaway PostgreSQL ...")
    with TemporaryPostgres() as pg:
        async with SmtpSink(rules=rules) as sink:
            say(f"PostgreSQL at {pg.url}; SMTP sink at {sink.host}:{sink.port}")
            store = await Store.open(pg.url)
            try:
                await store.migrate(load_migrations())
                await store.run_sql(COMMITTED)
                await store.run_sql(ROLLED_BACK)
                say("committed 5 emails (plus a duplicate key); rolled back 1")
                await _run_daemon_until_done(pg.url, sink.port, store, timeout_seconds)
                rows = {r["dedupe_key"]: r for r in await store.status(KEYS)}
            finally:
                await store.close()
            _print_table(rows)
            say(f"\nthe SMTP sink received {len(sink.messages)} message(s)")
    expected = {"welcome-ada": "sent", "invoice-1042": "sent", "report-weekly": "sent",
                "bounce-permanent": "failed", "greylisted-once": "sent"}
    ok = all(rows.get(k, {}).get("status") == v for k, v in expected.items()) and "rolled-back" not in rows
    say("demo finished: every committed email reached a final state" if ok else "demo: unexpected outcome")
    return 0 if ok else 1


async def _run_daemon_until_done(url: str, port: int, store: Store, timeout_seconds: float) -> None:
    settings = Settings(
        database_url=SecretStr(url),
        default_from="Outbox Demo <demo@example.com>",
        smtp=SmtpSettings(host="127.0.0.1", port=port, tls="none", command_timeout_seconds=5, data_timeout_seconds=5),
        retry=RetrySettings(base_seconds=0.5, max_seconds=1),
        poll_interval_seconds=0.5,
        shutdown_grace_seconds=5,
    )
    smtp = SmtpTransport(settings.smtp, probe_sender=probe_sender(settings))
    daemon = Daemon(settings, {"smtp": smtp})
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            with anyio.fail_after(timeout_seconds):
                while await store.count_unfinished():
                    await anyio.sleep(0.1)
            daemon.stop()
    finally:
        await smtp.aclose()


def _print_table(rows: Mapping[str, Mapping[str, Any]]) -> None:
    say(f"\n{'dedupe_key':18} {'status':10} {'attempts':>8}  last_error")
    for key in KEYS:
        row = rows.get(key)
        if row is None:
            say(f"{key:18} {'(absent)':10} {'-':>8}  rolled back: never entered the outbox")
            continue
        say(f"{key:18} {row['status']:10} {row['attempts']:>8}  {row['last_error'] or ''}")


if __name__ == "__main__":
    sys.exit(anyio.run(run_demo))
