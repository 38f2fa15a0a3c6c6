"""Rows the table accepted, or accepts no more, that no decoder handles (issue: defects, items 1, 2, 4).

The schema refuses them at INSERT (version 6). Rows written before that, or past
its checks, are simulated by dropping the checks: the daemon must fail each such
row alone, naming the field, send the rest of its batch, and keep running.
"""

from __future__ import annotations

from typing import Any

import anyio
import asyncpg
import pytest

from outbox_mailer.store import Store
from tests.integration.conftest import insert
from tests.smtp_server import SmtpTestServer

pytestmark = pytest.mark.anyio

NESTED = "(repeat('[', 3000) || repeat(']', 3000))::jsonb"
HOSTILE = {
    # key: (column, SQL expression, field the error names)
    "far-future-expiry": ("expires_at", "'10000-01-01'", "expires_at"),
    "before-christ": ("scheduled_at", "'0044-03-15 BC'", "scheduled_at"),
    "deep-metadata": ("metadata", "jsonb_build_object('a', " + NESTED + ")", "metadata"),
    "deep-headers": ("headers", "jsonb_build_object('X-A', " + NESTED + ")", "headers"),
    "deep-attachments": ("attachments", "jsonb_build_array(" + NESTED + ")", "attachments"),
    "huge-number": ("metadata", "('{\"n\": ' || repeat('7', 5000) || '}')::jsonb", "metadata"),
}
CHECKS_OF_VERSION_6 = ["email_deliveries_scheduled_at_range", "email_deliveries_expires_at_range",
                       "email_deliveries_created_at_range"]


async def insert_sql(store: Store, key: str, column: str, expression: str) -> None:
    await store.execute(
        f"INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, {column}) "
        f"VALUES ('{key}', ARRAY['to@example.com'], 's', 'b', {expression})"
    )


async def drop_checks(store: Store) -> None:
    """Make the table behave as before version 6 (rows the checks would now refuse)."""
    for name in CHECKS_OF_VERSION_6:
        # IF EXISTS: since schema 8 some of these are checked by the content trigger, disabled below
        await store.execute(f"ALTER TABLE email_deliveries DROP CONSTRAINT IF EXISTS {name}")
    await store.execute("ALTER TABLE email_deliveries DISABLE TRIGGER email_deliveries_check_content")


@pytest.mark.parametrize("key", sorted(HOSTILE))
async def test_the_schema_refuses_what_the_daemon_cannot_read(store: Store, key: str) -> None:
    column, expression, _ = HOSTILE[key]
    with pytest.raises(Exception) as raised:
        await insert_sql(store, key, column, expression)
    cause = raised.value.__cause__ or raised.value
    assert isinstance(cause, asyncpg.CheckViolationError), cause
    assert column in str(cause) or column in (cause.constraint_name or "")


@pytest.mark.parametrize(("column", "value"), [
    ("scheduled_at", "'infinity'"), ("scheduled_at", "'-infinity'"), ("expires_at", "'-infinity'"),
    ("created_at", "'20000-01-01'"), ("to_addresses", "ARRAY[ARRAY['a@example.com'], ARRAY['b@example.com']]"),
])
async def test_the_schema_refuses_infinite_or_unrepresentable_values(store: Store, column: str, value: str) -> None:
    with pytest.raises(Exception) as raised:
        if column == "to_addresses":
            await store.execute("INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body) "
                                f"VALUES ('x', {value}, 's', 'b')")
        else:
            await insert_sql(store, "x", column, value)
    assert isinstance(raised.value.__cause__ or raised.value, asyncpg.CheckViolationError)


async def test_json_nested_32_levels_is_accepted(store: Store) -> None:
    await insert_sql(store, "ok", "metadata", "jsonb_build_object('a', (repeat('[', 31) || repeat(']', 31))::jsonb)")


async def test_content_bytes_is_written_by_the_database(store: Store) -> None:
    await insert(store, "sized", subject="abc", text_body="x" * 1000, to_addresses=["to@example.com"])
    n = await store.fetch("SELECT content_bytes FROM email_deliveries WHERE dedupe_key = 'sized'")
    assert 1000 + 3 + len("to@example.com") <= n[0]["content_bytes"] < 1100


async def test_infinite_expiry_means_never_expires(running: Any, store: Store) -> None:
    await insert_sql(store, "forever", "expires_at", "'infinity'")
    r = await running()
    rows = await r.final("forever")
    assert rows["forever"]["status"] == "sent", rows["forever"]["last_error"]


async def test_a_row_due_in_the_far_future_does_not_trouble_an_idle_daemon(running: Any, store: Store) -> None:
    await insert_sql(store, "later", "scheduled_at", "'9998-12-30'")
    r = await running(poll_interval_seconds=0.2)
    await anyio.sleep(1.0)  # several idle rounds, each reading next_due_at
    await insert(store, "now")
    rows = await r.final("now")
    assert rows["now"]["status"] == "sent"
    assert (await store.status(["later"]))[0]["status"] == "pending"


async def test_each_unreadable_row_fails_alone_and_the_batch_goes_on(
    running: Any, store: Store, smtp_server: SmtpTestServer
) -> None:
    await drop_checks(store)
    for key, (column, expression, _) in HOSTILE.items():
        await insert_sql(store, key, column, expression)
    for i in range(5):
        await insert(store, f"fine-{i}")
    r = await running(batch_size=100)
    rows = await r.final(*HOSTILE, *[f"fine-{i}" for i in range(5)])
    for key, (_, _, field) in HOSTILE.items():
        assert rows[key]["status"] == "failed", (key, rows[key])
        assert rows[key]["last_error"].startswith("cannot send this row as stored: " + field), rows[key]
        assert rows[key]["attempts"] == 0, "a row that cannot be read is not an attempt"
    assert all(rows[f"fine-{i}"]["status"] == "sent" for i in range(5))
    assert len(smtp_server.messages) == 5
    assert not r.daemon._stopping.is_set()  # still running


async def test_content_over_the_size_limit_fails_unread(
    running: Any, store: Store, smtp_server: SmtpTestServer
) -> None:
    await insert(store, "big", attachments=[{"filename": "a.bin", "content_type": "application/octet-stream",
                                             "content_base64": "QUFB" * 100_000}])
    await insert(store, "small")
    r = await running(max_message_bytes=100_000)
    rows = await r.final("big", "small")
    assert rows["big"]["status"] == "failed"
    assert "content: " in rows["big"]["last_error"] and "not loaded" in rows["big"]["last_error"]
    assert rows["small"]["status"] == "sent" and len(smtp_server.messages) == 1


async def test_the_rescuer_reads_unreadable_rows_without_dying(running: Any, store: Store) -> None:
    await drop_checks(store)
    await insert_sql(store, "stranded", "expires_at", "'10000-01-01'")
    # a claim left by a dead process (the way today's crash left it)
    await store.execute("UPDATE email_deliveries SET status = 'sending', claim_token = gen_random_uuid(), "
                        "claimed_at = now() - interval '1 hour', claimed_by = 'dead:1', attempts = 1")
    r = await running(rescue_interval_seconds=0.2)  # the claim is an hour old: older than any rescue delay
    rows = await r.final("stranded", timeout=15)
    assert rows["stranded"]["status"] == "failed"
    assert "expires_at" in rows["stranded"]["last_error"]


async def test_an_update_of_the_content_is_checked_and_resized(store: Store) -> None:
    await insert(store, "edited", text_body="x" * 100)
    await store.execute("UPDATE email_deliveries SET text_body = repeat('y', 5000) WHERE dedupe_key = 'edited'")
    [row] = await store.fetch("SELECT content_bytes FROM email_deliveries WHERE dedupe_key = 'edited'")
    assert row["content_bytes"] > 5000, "the size follows the content"
    with pytest.raises(Exception) as raised:
        await store.execute("UPDATE email_deliveries SET metadata = jsonb_build_object('a', " + NESTED + ") "
                            "WHERE dedupe_key = 'edited'")
    assert isinstance(raised.value.__cause__ or raised.value, asyncpg.CheckViolationError)


async def test_claims_and_outcome_writes_fire_no_row_trigger_function(store: Store) -> None:
    """A BEFORE UPDATE row trigger would make PostgreSQL fetch and lock the old row on every
    claim and outcome write (the hot path); the content checks fire on INSERT and after an
    UPDATE of the content only."""
    rows = await store.fetch(
        "SELECT tgname FROM pg_trigger WHERE tgrelid = 'email_deliveries'::regclass AND NOT tgisinternal "
        "AND (tgtype & 2) <> 0 AND (tgtype & 16) <> 0")  # BEFORE (2) and UPDATE (16)
    assert rows == []
