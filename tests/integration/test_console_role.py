"""The console's database role, as `grant --console-role` makes it, against real PostgreSQL: it changes rows
only through functions that keep the CLI's rules and take the actor from a session row, and each thing
it used to be able to do beyond that is refused: a sent row set back to pending, an action recorded
under another actor, the users' password hashes read."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from outbox_mailer.store.grants import grant_statements
from tests.conftest import psql
from tests.console_harness import password_hash, served_console
from tests.integration.conftest import insert
from tests.integration.test_console_pages import set_status
from tests.integration.test_roles_and_retention import as_user
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio
ACT = "SELECT k FROM email_console_act($1, $2, $3::text[], NULL, 3, '{}') AS k"


@pytest.fixture
async def console_conn(db_url: str, store: SqlStore) -> AsyncIterator[tuple[asyncpg.Connection, bytes, bytes]]:
    """A connection as the console's role, and the session hashes of olga (operator) and victor (viewer),
    signed in through the console running as that role."""
    suffix = uuid.uuid4().hex[:8]
    app, daemon, console = f"app_{suffix}", f"mailer_{suffix}", f"console_{suffix}"
    psql(db_url, f"CREATE ROLE {app} LOGIN; CREATE ROLE {daemon} LOGIN")
    try:
        await store.run_script(grant_statements(app, daemon, console))
        for name, role in (("olga", "operator"), ("victor", "viewer")):
            await store.execute("INSERT INTO email_console_users (name, role, password_hash) VALUES ($1, $2, $3)",
                                name, role, password_hash())
        async with served_console(as_user(db_url, console), users=()) as served:
            for name in ("olga", "victor"):
                assert (await served.client().login(name)).status_code == 303
        hashes = {r["user_name"]: bytes(r["token_hash"])
                  for r in await store.fetch("SELECT user_name, token_hash FROM email_console_sessions")}
        conn = await asyncpg.connect(as_user(db_url, console))
        try:
            yield conn, hashes["olga"], hashes["victor"]
        finally:
            await conn.close()
    finally:
        psql(db_url, f"DROP OWNED BY {app}, {daemon}, {console}; DROP ROLE {app}; DROP ROLE {daemon}; "
                     f"DROP ROLE {console}")


async def test_the_console_role_cannot_set_a_sent_row_back_to_pending(console_conn, store: SqlStore) -> None:  # type: ignore[no-untyped-def]
    conn, olga, _ = console_conn
    await insert(store, "s1")
    await set_status(store, "s1", "sent")
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await conn.execute("UPDATE email_deliveries SET status = 'pending', sent_at = NULL WHERE dedupe_key = 's1'")
    assert await conn.fetch(ACT, olga, "retry", ["s1"]) == []  # the function keeps the rule: nothing done
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await conn.fetch("SELECT email_delivery_retry(ARRAY['s1'], 1, 1)")  # the rule's own function: not the console's
    assert (await store.status(["s1"]))[0]["status"] == "sent"


async def test_the_console_role_records_actions_under_the_sessions_operator_only(console_conn,  # type: ignore[no-untyped-def]
                                                                                 store: SqlStore) -> None:
    conn, olga, victor = console_conn
    await insert(store, "f1")
    await set_status(store, "f1", "failed")
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await conn.execute("INSERT INTO email_operator_actions (actor, action, dedupe_key) VALUES ('victor', 'retry', 'f1')")
    for session in (victor, b"\0" * 32):  # a viewer's session, no session
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.fetch(ACT, session, "retry", ["f1"])
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("SELECT email_console_suppress($1, 'a@b.example', 'manual', NULL)", session)
    assert [r["k"] for r in await conn.fetch(ACT, olga, "retry", ["f1"])] == ["f1"]
    rows = await store.fetch("SELECT actor, action, dedupe_key FROM email_operator_actions")
    assert [(r["actor"], r["action"], r["dedupe_key"]) for r in rows] == [("olga", "retry", "f1")]
    await store.execute("UPDATE email_console_users SET role = 'viewer' WHERE name = 'olga'")
    with pytest.raises(asyncpg.InsufficientPrivilegeError):  # demoted: the session's role is no longer hers
        await conn.fetch(ACT, olga, "cancel", ["f1"])


async def test_the_console_role_cannot_read_the_password_hashes(console_conn) -> None:  # type: ignore[no-untyped-def]
    conn, _, _ = console_conn
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await conn.fetch("SELECT password_hash FROM email_console_users")
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await conn.fetch("SELECT * FROM email_console_users")
    assert [r["name"] for r in await conn.fetch("SELECT name, role FROM email_console_users ORDER BY name")] == [
        "olga", "victor"]


async def test_the_console_functions_are_security_definer_with_a_fixed_search_path_and_not_public(
        store: SqlStore) -> None:
    rows = await store.fetch(
        "SELECT proname, prosecdef, proconfig, has_function_privilege('public', oid, 'EXECUTE') AS public "
        "FROM pg_proc WHERE proname LIKE 'email\\_console\\_%' ORDER BY proname")
    assert [r["proname"] for r in rows] == ["email_console_act", "email_console_operator",
                                            "email_console_password_hash", "email_console_pause",
                                            "email_console_resume", "email_console_suppress",
                                            "email_console_unsuppress"]
    for r in rows:
        assert r["prosecdef"] and any(c.startswith("search_path=") for c in r["proconfig"]), r["proname"]
        assert not r["public"], r["proname"]


async def test_the_console_role_pauses_a_transport_only_through_its_function_as_an_operator(  # type: ignore[no-untyped-def]
        console_conn, store: SqlStore) -> None:
    conn, olga, victor = console_conn
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await conn.execute("INSERT INTO email_transport_pauses (transport, source, paused_by) "
                           "VALUES ('smtp', 'operator', 'olga')")
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await conn.execute("SELECT email_console_pause($1, 'smtp', 'x', NULL)", victor)
    await conn.execute("SELECT email_console_pause($1, 'smtp', 'relay maintenance', NULL)", olga)
    assert [(r["transport"], r["paused_by"]) for r in await conn.fetch("SELECT * FROM email_transport_pauses")] == [
        ("smtp", "olga")]
    assert await conn.fetchval("SELECT email_console_resume($1, 'smtp')", olga) is True
    assert [(r["actor"], r["action"], r["transport"]) for r in await store.fetch(
        "SELECT actor, action, transport FROM email_operator_actions ORDER BY id")] == [
        ("olga", "pause", "smtp"), ("olga", "resume", "smtp")]


async def test_the_console_role_reads_stored_templates_and_cannot_add_one(console_conn, store: SqlStore) -> None:  # type: ignore[no-untyped-def]
    conn, _, _ = console_conn
    await store.execute("INSERT INTO email_templates (name, locale, version, subject, text_body, created_by) "
                        "VALUES ('welcome', 'en', 1, 'Hi', 'body', 'test')")
    assert [r["name"] for r in await conn.fetch("SELECT name FROM email_templates")] == ["welcome"]
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await conn.execute("INSERT INTO email_templates (name, locale, version, subject, text_body, created_by) "
                           "VALUES ('x', 'en', 1, 'Hi', 'body', 'console')")
