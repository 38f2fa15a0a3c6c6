"""The upgrade to schema 12 over rows that break its rules (issue 16, item 5; the matrices of rows refused
and accepted at INSERT are in test_refused_at_insert.py).

The same injections written before schema 12 (simulated by upgrading a database that holds them): the
migration applies, the old rows stay readable and updatable where the update leaves the offending column
alone, a new hostile value is refused, and the daemon fails each old hostile row naming the field. No
injected header or recipient ever reaches the SMTP server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import asyncpg
import pytest

from outbox_mailer.daemon.service import Daemon
from outbox_mailer.store import Store
from outbox_mailer.store.migrations import load_migrations
from outbox_mailer.transports.smtp import SmtpTransport
from tests.in_process_daemon import Running, settings_for
from tests.integration.test_refused_at_insert import (
    ATTACHMENT,
    INJECTED,
    VICTIM,
    assert_nothing_injected,
    asyncpg_insert,
)
from tests.smtp_server import SmtpTestServer
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio


OLD_HOSTILE = {  # written under schema 11, which accepted them; (columns, field the daemon names)
    "old-subject": ({"subject": f"hi\r\nBcc: {VICTIM}"}, "subject"),
    "old-to": ({"to_addresses": [f"x@example.com\r\nRCPT TO:<{VICTIM}>"]}, "to_addresses[0]"),
    "old-cc": ({"cc_addresses": [f"cc@example.com\n{VICTIM}"]}, "cc_addresses[0]"),
    "old-reply-to": ({"reply_to": f"r@example.com\r\n{INJECTED}: 1"}, "reply_to"),
    "old-header-value": ({"headers": {"X-Note": f"a\r\nBcc: {VICTIM}"}}, "headers.X-Note"),
    "old-header-name": ({"headers": {f"X-A\r\nBcc: {VICTIM}\r\nX-B": "v"}}, "headers"),
    "old-attachment-keys": ({"attachments": [{"filename": "a.txt", "content_type": "text/plain"}]},
                            "attachments[0]"),
    "old-attachment-filename": ({"attachments": [{**ATTACHMENT, "filename": f"a\r\n{INJECTED}: 1"}]},
                                "attachments[0].filename"),
}


@asynccontextmanager
async def daemon_on(url: str, server: SmtpTestServer) -> AsyncIterator[Running]:
    settings = settings_for(url, server)
    transport = SmtpTransport(settings.smtp)
    daemon = Daemon(settings, {"smtp": transport})
    store = await SqlStore.open(url)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            try:
                yield Running(daemon, store)
            finally:
                daemon.stop()
    finally:
        await transport.aclose()
        await store.close()


async def test_the_upgrade_applies_over_old_rows_that_break_the_new_rules(
    empty_db_url: str, smtp_server: SmtpTestServer
) -> None:
    migrations = load_migrations()
    store = await Store.open(empty_db_url)
    try:
        await store.migrate([m for m in migrations if m.version < 12])
        conn = await asyncpg.connect(empty_db_url)
        try:
            for key, (cols, _) in OLD_HOSTILE.items():
                await asyncpg_insert(conn, key, cols)  # schema 11 takes them
            for key in ("old-sent", "old-scrub"):
                await asyncpg_insert(conn, key, OLD_HOSTILE["old-subject"][0])
            await conn.execute("UPDATE email_deliveries SET status = 'sent', sent_at = now() "
                               "WHERE dedupe_key IN ('old-sent', 'old-scrub')")
            await asyncpg_insert(conn, "old-fine", {})

            applied = await store.migrate(migrations)  # no exception: old rows do not block it
            assert 12 in [m.version for m in applied]
            assert await store.schema_version() == len(migrations)

            # the old rows are as they were, and still readable and updatable where the update
            # leaves the offending column alone (prune's scrub, an operator's cancel)
            assert await conn.fetchval("SELECT subject FROM email_deliveries WHERE dedupe_key = 'old-sent'") \
                == OLD_HOSTILE["old-subject"][0]["subject"]
            await conn.execute("UPDATE email_deliveries SET text_body = '', html_body = NULL, attachments = '[]', "
                               "headers = '{}', scrubbed_at = now() WHERE dedupe_key = 'old-scrub'")
            await conn.execute("UPDATE email_deliveries SET text_body = 'still here' WHERE dedupe_key = 'old-sent'")
            # ... but a new hostile value is refused, and a clean one accepted
            with pytest.raises(asyncpg.CheckViolationError) as raised:
                await conn.execute("UPDATE email_deliveries SET subject = E'x\\ny' WHERE dedupe_key = 'old-sent'")
            assert raised.value.constraint_name == "email_deliveries_subject_no_control_chars"
            await conn.execute("UPDATE email_deliveries SET subject = 'clean' WHERE dedupe_key = 'old-sent'")
            with pytest.raises(asyncpg.CheckViolationError):
                await asyncpg_insert(conn, "new-subject", OLD_HOSTILE["old-subject"][0])
        finally:
            await conn.close()
    finally:
        await store.close()

    # the daemon of schema 12 fails each old hostile row naming the field, sends the fine one
    async with daemon_on(empty_db_url, smtp_server) as r:
        rows = await r.final(*OLD_HOSTILE, "old-fine")
    for key, (_, field) in OLD_HOSTILE.items():
        assert rows[key]["status"] == "failed", (key, rows[key])
        assert field in rows[key]["last_error"], (key, rows[key]["last_error"])
    assert rows["old-fine"]["status"] == "sent"
    assert_nothing_injected(smtp_server, expected_messages=1)
