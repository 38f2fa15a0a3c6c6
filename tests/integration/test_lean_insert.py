"""Schema 30's INSERT (sql/0030_lean_insert.sql): a plain row skips the rule-by-rule functions through one
conjunction and gets its queue row from a row trigger. What the row gets is the same either way: the content
size the docs state, a queue row for each pending row inserted (none for a row ON CONFLICT skipped), one
notification per transaction and only at COMMIT. The rules a plain row can break are refused by name in
test_schema.py."""

from __future__ import annotations

import json

import anyio
import asyncpg
import pytest

from outbox_mailer.store import Listener

pytestmark = pytest.mark.anyio

COLUMNS = "dedupe_key, to_addresses, cc_addresses, bcc_addresses, subject, text_body, html_body, headers, metadata"

# (cc, bcc, text, html, headers, metadata): plain rows of several shapes, then rows the conjunction passes to
# the rule-by-rule path (custom headers, metadata of 66 characters or more)
SHAPES = [
    ([], [], "text body", None, {}, {}),
    (["c@example.com"], ["b1@example.com", "b2@example.com"], None, "<p>Zoë</p>", {}, {"order": 1042}),
    ([], [], "ünïcödé ✓", "<b>x</b>", {}, {"k": "v" * 50}),
    ([], [], "text", None, {"X-Campaign": "spring"}, {}),
    ([], [], "text", None, {}, {"note": "v" * 80}),
]


def expected_size(to: list[str], cc: list[str], bcc: list[str], subject: str, text: str | None, html: str | None,
                  headers: dict[str, str], metadata: dict[str, object], jsonb_text: dict[str, str]) -> int:
    """The content size as docs/configuration.md states it: the subject, bodies and addresses (each list
    joined by spaces), and the JSON documents as PostgreSQL prints them."""
    parts = [subject, text or "", html or "", " ".join(to), " ".join(cc), " ".join(bcc),
             jsonb_text["headers"], "[]", jsonb_text["metadata"]]
    return sum(len(p.encode()) for p in parts)


@pytest.mark.parametrize("shape", range(len(SHAPES)))
async def test_the_content_size_is_the_same_rule_on_either_path(own_conn: asyncpg.Connection, shape: int) -> None:
    cc, bcc, text, html, headers, metadata = SHAPES[shape]
    to, subject = ["Zoë <to@example.com>"], "Your receipt"
    await own_conn.execute(
        f"INSERT INTO email_deliveries ({COLUMNS}) VALUES ('k', $1, $2, $3, $4, $5, $6, $7::jsonb, $8::jsonb)",
        to, cc, bcc, subject, text, html, json.dumps(headers), json.dumps(metadata))
    row = await own_conn.fetchrow("SELECT content_bytes, headers::text AS headers, metadata::text AS metadata "
                                  "FROM email_deliveries WHERE dedupe_key = 'k'")
    assert row["content_bytes"] == expected_size(to, cc, bcc, subject, text, html, headers, metadata, dict(row))


async def test_each_pending_row_inserted_gets_one_queue_row_and_a_skipped_one_none(own_conn: asyncpg.Connection) -> None:
    await own_conn.execute("INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, priority) "
                           "VALUES ('k2', ARRAY['a@example.com'], 'first', 'x', 3)")
    await own_conn.execute(
        "INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, scheduled_at, transport) "
        "SELECT 'k' || g, ARRAY['a@example.com'], 'hi', 'x', now() + g * interval '1 hour', 'smtp' "
        "FROM generate_series(1, 4) g ON CONFLICT (dedupe_key) DO NOTHING")
    await own_conn.execute("INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, status) "
                           "VALUES ('done', ARRAY['a@example.com'], 'hi', 'x', 'cancelled')")
    queue = await own_conn.fetch(
        "SELECT d.dedupe_key, q.priority = d.priority AND q.scheduled_at = d.scheduled_at "
        "AND q.transport IS NOT DISTINCT FROM d.transport AS same, q.claimed_at "
        "FROM email_queue q JOIN email_deliveries d ON d.id = q.delivery_id ORDER BY d.dedupe_key")
    assert [(r["dedupe_key"], r["same"], r["claimed_at"]) for r in queue] == [
        ("k1", True, None), ("k2", True, None), ("k3", True, None), ("k4", True, None)]
    [k2] = await own_conn.fetch("SELECT priority, transport FROM email_deliveries WHERE dedupe_key = 'k2'")
    assert (k2["priority"], k2["transport"]) == (3, None), "the skipped row's values did not replace the first"


async def test_a_transaction_of_inserts_notifies_once_at_commit_and_a_rollback_or_a_later_row_never(
        db_url: str, own_conn: asyncpg.Connection) -> None:
    heard: list[None] = []
    listener = await Listener.open(db_url, lambda: heard.append(None))

    async def settled() -> int:
        await anyio.sleep(0.3)
        return len(heard)

    insert = "INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, scheduled_at) " \
             "VALUES ($1, ARRAY['a@example.com'], 'hi', 'x', now() + $2 * interval '1 day')"
    try:
        async with own_conn.transaction():
            for i in range(5):
                await own_conn.execute(insert, f"now-{i}", 0)
            assert await settled() == 0, "nothing before COMMIT"
        assert await settled() == 1, "five rows due now, one transaction: one notification"
        await own_conn.execute(insert, "later", 1)
        assert await settled() == 1, "a row due tomorrow: the daemons' timers cover it"
        tx = own_conn.transaction()
        await tx.start()
        await own_conn.execute(insert, "rolled-back", 0)
        await tx.rollback()
        assert await settled() == 1, "a rolled-back INSERT wakes nobody"
    finally:
        await listener.close()


async def test_the_content_size_is_inlined_where_it_is_called(own_conn: asyncpg.Connection) -> None:
    # a SQL function declared more strictly than its body (IMMUTABLE over STABLE array_to_string) is run as a
    # call of its own on every INSERT, which cost more than the rules the conjunction skips
    plan = await own_conn.fetch(
        "EXPLAIN (VERBOSE) SELECT email_deliveries_content_size($1, $2, NULL, $3, '{}', '{}', '{}', '[]', '{}', NULL)",
        "subject", "body", ["a@example.com"])
    text = "\n".join(r[0] for r in plan)
    assert "email_deliveries_content_size" not in text and "array_to_string" in text, text


async def test_rows_loaded_with_copy_are_checked_and_queued_like_inserted_ones(
        db_url: str, own_conn: asyncpg.Connection) -> None:
    heard: list[None] = []
    listener = await Listener.open(db_url, lambda: heard.append(None))
    columns = ["dedupe_key", "to_addresses", "subject", "text_body"]
    try:
        await own_conn.copy_records_to_table(
            "email_deliveries", columns=columns,
            records=[(f"copied-{i}", ["a@example.com"], "hi", "x") for i in range(50)])
        await anyio.sleep(0.3)
        assert len(heard) == 1, "one COPY, one transaction: one notification"
        queued = await own_conn.fetchval("SELECT count(*) FROM email_queue q JOIN email_deliveries d "
                                         "ON d.id = q.delivery_id WHERE d.dedupe_key LIKE 'copied-%'")
        sized = await own_conn.fetchval("SELECT count(*) FROM email_deliveries WHERE dedupe_key LIKE 'copied-%' "
                                        "AND content_bytes = octet_length('hi' || 'x' || 'a@example.com' || '{}' "
                                        "|| '[]' || '{}')")
        assert (queued, sized) == (50, 50)
        with pytest.raises(asyncpg.CheckViolationError, match="email_deliveries_has_body"):
            await own_conn.copy_records_to_table(
                "email_deliveries", columns=columns,
                records=[("copied-ok", ["a@example.com"], "hi", "x"), ("copied-bad", ["a@example.com"], "hi", None)])
        assert await own_conn.fetchval("SELECT count(*) FROM email_deliveries WHERE dedupe_key LIKE 'copied-%'") == 50
    finally:
        await listener.close()
