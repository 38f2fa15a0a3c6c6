"""Schema version 6 on a database that already holds rows it now refuses."""

from __future__ import annotations

import pytest

from outbox_mailer.store.migrations import load_migrations
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio


async def test_upgrading_fails_unsendable_rows_and_validates_the_new_checks(empty_db_url: str) -> None:
    migrations = load_migrations()
    store = await SqlStore.open(empty_db_url)
    try:
        await store.migrate([m for m in migrations if m.version <= 5])
        await store.execute("""
            INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, expires_at, scheduled_at)
            VALUES ('fine', ARRAY['a@example.com'], 's', 'b', NULL, now()),
                   ('forever', ARRAY['a@example.com'], 's', 'b', 'infinity', now()),
                   ('far', ARRAY['a@example.com'], 's', 'b', '10000-01-01', now()),
                   ('bc', ARRAY['a@example.com'], 's', 'b', NULL, '0044-03-15 BC'),
                   ('stuck', ARRAY['a@example.com'], 's', 'b', '10000-01-01', now()),
                   ('done', ARRAY['a@example.com'], 's', 'b', '10000-01-01', now())""")
        # a claim stranded by a daemon that crashed on the row; a row sent before the value was changed
        await store.execute("UPDATE email_deliveries SET status = 'sending', claim_token = gen_random_uuid(), "
                            "claimed_at = now(), attempts = 1 WHERE dedupe_key = 'stuck'")
        await store.execute("UPDATE email_deliveries SET status = 'sent', sent_at = now() WHERE dedupe_key = 'done'")
        assert [m.version for m in await store.migrate([m for m in migrations if m.version <= 7])] == [6, 7]
        rows = {r["dedupe_key"]: r for r in await store.fetch(
            "SELECT dedupe_key, status, last_error, expires_at = 'infinity' AS never, claim_token, content_bytes "
            "FROM email_deliveries")}
        assert (rows["fine"]["status"], rows["fine"]["last_error"]) == ("pending", None)
        assert (rows["forever"]["status"], rows["forever"]["never"]) == ("pending", True)
        for key in ("far", "bc", "stuck"):
            assert rows[key]["status"] == "failed" and rows[key]["claim_token"] is None
            assert "timestamp out of range" in rows[key]["last_error"]
        assert "10000-01-01" in rows["far"]["last_error"] and "BC" in rows["bc"]["last_error"]
        assert rows["done"]["status"] == "sent", "a final row keeps its status"
        assert all(r["content_bytes"] is None for r in rows.values()), "no rewrite of existing rows"
        unvalidated = await store.fetch("SELECT conname FROM pg_constraint WHERE conrelid = "
                                        "'email_deliveries'::regclass AND NOT convalidated")
        assert unvalidated == []
    finally:
        await store.close()
