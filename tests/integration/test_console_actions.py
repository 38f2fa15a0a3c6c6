"""What operators change from the console, over real HTTP against real PostgreSQL: the CLI's rules hold
(no cancel of a row being sent, retry's new tries), bulk actions change exactly the confirmed
selection or nothing (409), suppressions, and every change is a row of email_operator_actions. The
console connects as the role `grant --console-role` made, which can do no more than that."""

from __future__ import annotations

import html
import re
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from outbox_mailer.store.grants import grant_statements
from tests.conftest import psql
from tests.console_harness import Client, password_hash, served_console
from tests.integration.conftest import insert
from tests.integration.test_console_pages import set_status
from tests.integration.test_roles_and_retention import as_user
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio


@pytest.fixture
async def operator(db_url: str) -> AsyncIterator[Client]:
    async with served_console(db_url, max_attempts=3) as served:
        client = served.client()
        await client.login("olga")
        yield client
        await client.aclose()


async def actions(store: SqlStore) -> list[tuple[str, str, str | None, str | None]]:
    rows = await store.fetch("SELECT actor, action, dedupe_key, address FROM email_operator_actions ORDER BY id")
    return [(r["actor"], r["action"], r["dedupe_key"], r["address"]) for r in rows]


async def test_retry_cancel_and_resolve_follow_the_cli_rules_and_are_recorded(operator: Client, store: SqlStore) -> None:
    for key in ("failed", "pending", "sending", "doubt-a", "doubt-b"):
        await insert(store, key, max_attempts=2 if key == "failed" else None)
    await store.execute("UPDATE email_deliveries SET attempts = 2 WHERE dedupe_key = 'failed'")
    await set_status(store, "failed", "failed")
    await store.execute("UPDATE email_deliveries SET status = 'sending', claim_token = gen_random_uuid(), "
                      "claimed_at = now() WHERE dedupe_key = 'sending'")
    await set_status(store, "doubt-a", "in_doubt")
    await set_status(store, "doubt-b", "in_doubt")

    done = await operator.post("/emails/failed/retry")
    assert done.status_code == 303 and done.headers["location"] == "/emails/failed?done=retry"
    row = (await store.status(["failed"]))[0]
    assert row["status"] == "pending" and row["max_attempts"] == 4  # its own 2 new tries, as `retry KEY`
    assert "Requeued" in (await operator.get("/emails/failed?done=retry")).text

    refused = await operator.post("/emails/sending/cancel")
    assert refused.status_code == 409 and "sending" in refused.text
    assert (await store.status(["sending"]))[0]["status"] == "sending"
    assert (await operator.post("/emails/pending/cancel")).status_code == 303
    assert (await store.status(["pending"]))[0]["status"] == "cancelled"

    assert (await operator.post("/emails/doubt-a/resolve", {"as": "maybe"})).status_code == 400
    assert (await operator.post("/emails/doubt-a/resolve", {"as": "sent"})).status_code == 303
    assert (await operator.post("/emails/doubt-b/resolve", {"as": "failed", "back": "in-doubt"})).headers[
        "location"] == "/in-doubt"
    states = {r["dedupe_key"]: r["status"] for r in await store.status(["doubt-a", "doubt-b"])}
    assert states == {"doubt-a": "sent", "doubt-b": "failed"}
    assert (await operator.post("/emails/doubt-a/resolve", {"as": "failed"})).status_code == 409

    assert await actions(store) == [("olga", "retry", "failed", None), ("olga", "cancel", "pending", None),
                                  ("olga", "resolve", "doubt-a", None), ("olga", "resolve", "doubt-b", None)]
    assert "olga retry" in (await operator.get("/emails/failed")).text


async def test_bulk_retry_changes_exactly_the_confirmed_selection(operator: Client, store: SqlStore) -> None:
    for i in range(60):
        await insert(store, f"b{i:02}", transport="api" if i < 50 else None)
        await set_status(store, f"b{i:02}", "failed")
    await insert(store, "api-pending", transport="api")
    confirm = await operator.get("/emails?status=failed&transport=api&bulk=retry")
    assert confirm.status_code == 200 and "Retry 50 emails?" in confirm.text
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', confirm.text))
    assert fields["expected_count"] == "50" and fields["status"] == "failed" and fields["transport"] == "api"

    # one more row joins the selection after the count was shown: refused, nothing done
    await insert(store, "b-late", transport="api")
    await set_status(store, "b-late", "failed")
    changed = await operator.post("/emails/bulk-retry", {k: html.unescape(v) for k, v in fields.items()})
    assert changed.status_code == 409 and "51" in changed.text
    assert {r["status"] for r in await store.fetch("SELECT status FROM email_deliveries WHERE transport = 'api' "
                                                 "AND dedupe_key <> 'api-pending'")} == {"failed"}
    assert await actions(store) == []

    await set_status(store, "b-late", "sent")
    done = await operator.post("/emails/bulk-retry", {k: html.unescape(v) for k, v in fields.items()})
    assert done.status_code == 200 and "Requeued 50 emails" in done.text
    statuses = {r["dedupe_key"]: r["status"] for r in await store.fetch("SELECT dedupe_key, status FROM email_deliveries")}
    assert [k for k, s in statuses.items() if s == "pending" and k.startswith("b")] == [f"b{i:02}" for i in range(50)]
    assert all(statuses[f"b{i}"] == "failed" for i in range(50, 60))
    recorded = await actions(store)
    assert len(recorded) == 50 and {a[:2] for a in recorded} == {("olga", "retry")}
    assert (await operator.post("/emails/bulk-retry", {"expected_count": "many"})).status_code == 400


async def test_bulk_cancel_takes_pending_rows_only(operator: Client, store: SqlStore) -> None:
    for i in range(4):
        await insert(store, f"c{i}")
    await store.execute("UPDATE email_deliveries SET status = 'sending', claim_token = gen_random_uuid(), "
                      "claimed_at = now() WHERE dedupe_key = 'c0'")
    confirm = await operator.get("/emails?key=c&bulk=cancel")
    assert "Cancel 3 emails?" in confirm.text
    done = await operator.post("/emails/bulk-cancel", {"key": "c", "expected_count": "3"})
    assert done.status_code == 200 and "Cancelled 3 emails" in done.text
    states = {r["dedupe_key"]: r["status"] for r in await store.fetch("SELECT dedupe_key, status FROM email_deliveries")}
    assert states == {"c0": "sending", "c1": "cancelled", "c2": "cancelled", "c3": "cancelled"}


async def test_suppressions_are_added_searched_and_removed(operator: Client, store: SqlStore) -> None:
    assert (await operator.post("/suppressions", {"address": "Bob <BOB@Example.com>", "reason": "manual",
                                                  "expires_days": "7"})).status_code == 303
    assert (await operator.post("/suppressions", {"address": "x+y@example.org", "reason": "complaint"})).status_code == 303
    assert (await operator.post("/suppressions", {"address": "not an address"})).status_code == 400
    assert (await operator.post("/suppressions", {"address": "a@b.example", "reason": "spite"})).status_code == 400
    assert (await operator.post("/suppressions", {"address": "a@b.example", "expires_days": "-1"})).status_code == 400
    page = (await operator.get("/suppressions?q=BOB")).text
    assert "bob@example.com" in page and "x+y@example.org" not in page
    assert (await operator.post("/suppressions/x%2By%40example.org/delete")).status_code == 303
    assert (await operator.post("/suppressions/x%2By%40example.org/delete")).status_code == 404
    assert [r["address"] for r in await store.fetch("SELECT address FROM email_suppressions")] == ["bob@example.com"]
    assert await actions(store) == [("olga", "suppress", None, "bob@example.com"),
                                  ("olga", "suppress", None, "x+y@example.org"),
                                  ("olga", "unsuppress", None, "x+y@example.org")]


async def test_the_console_role_does_its_work_and_nothing_more(db_url: str, store: SqlStore) -> None:
    suffix = uuid.uuid4().hex[:8]
    app, daemon, console = f"app_{suffix}", f"mailer_{suffix}", f"console_{suffix}"
    psql(db_url, f"CREATE ROLE {app} LOGIN; CREATE ROLE {daemon} LOGIN")
    try:
        await store.run_script(grant_statements(app, daemon, console))  # creates the console role
        await store.run_script(grant_statements(app, daemon, console))  # again, with the role there: no error
        await insert(store, "r1")
        await set_status(store, "r1", "failed")
        await store.execute("INSERT INTO email_console_users (name, role, password_hash) VALUES ('olga', 'operator', $1)",
                          password_hash())
        async with served_console(as_user(db_url, console), users=()) as served:
            client = served.client()
            assert (await client.login("olga")).status_code == 303
            for path in ("/", "/emails?status=failed", "/emails/r1", "/in-doubt", "/suppressions"):
                assert (await client.get(path)).status_code == 200, path
            assert (await client.post("/emails/r1/retry")).status_code == 303
            assert (await client.post("/suppressions", {"address": "z@example.com"})).status_code == 303
            assert (await client.post("/suppressions", {"address": "z@example.com", "reason": "complaint"})).status_code == 303
            assert (await client.post("/suppressions/z%40example.com/delete")).status_code == 303
        assert (await store.status(["r1"]))[0]["status"] == "pending"
        assert [a[1] for a in await actions(store)] == ["retry", "suppress", "suppress", "unsuppress"]
        conn = await asyncpg.connect(as_user(db_url, console))
        try:
            for statement in ("INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body) "
                              "VALUES ('x', '{a@b.example}', 's', 't')",
                              "UPDATE email_deliveries SET subject = 'changed'",
                              "UPDATE email_deliveries SET claim_token = gen_random_uuid()",
                              "DELETE FROM email_deliveries",
                              "DELETE FROM email_delivery_attempts",
                              "INSERT INTO email_console_users (name, role, password_hash) "
                              "VALUES ('m', 'operator', '$argon2x')",
                              "UPDATE email_console_users SET role = 'operator'",
                              "DELETE FROM email_operator_actions",
                              "UPDATE email_operator_actions SET actor = 'someone else'",
                              "DELETE FROM email_queue",
                              "TRUNCATE email_deliveries"):
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await conn.execute(statement)
        finally:
            await conn.close()
    finally:
        psql(db_url, f"DROP OWNED BY {app}, {daemon}, {console}; DROP ROLE {app}; DROP ROLE {daemon}; "
                     f"DROP ROLE {console}")
