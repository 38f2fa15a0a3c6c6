"""Console sessions kept in PostgreSQL, over real HTTP: the anonymous sign-in page stores nothing and ends
no session, a session survives a restart and works on a second console process sharing the signing key,
the table keeps hashes of tokens only, and the live refresh does not keep a forgotten tab signed in."""

from __future__ import annotations

import hashlib

import httpx
import pytest

from outbox_mailer.console.app import build_app
from tests.console_harness import served_console
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio
KEY = {"signing_key": "k" * 40}


async def test_anonymous_sign_in_pages_store_nothing_and_end_no_signed_in_session(db_url: str,
                                                                                  store: SqlStore) -> None:
    async with served_console(db_url) as served:
        olga = served.client()
        await olga.login("olga")
        app = build_app(served.console)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as anon:
            for _ in range(10_050):  # more than any table of anonymous sessions would hold
                response = await anon.get("/login", headers={"Cookie": ""})
                assert response.status_code == 200
                anon.cookies.clear()
        assert (await olga.get("/")).status_code == 200  # still signed in
        assert len(await store.fetch("SELECT * FROM email_console_sessions")) == 1


async def test_a_session_survives_a_restart_and_works_on_a_second_console(db_url: str, store: SqlStore) -> None:
    async with served_console(db_url, console=KEY) as first:
        olga = first.client()
        await olga.login("olga")
        cookie, csrf = olga.http.cookies["outbox_console"], olga.csrf
    async with served_console(db_url, users=(), console=KEY) as second:  # after a restart, or a second process
        again = second.client()
        again.http.cookies.set("outbox_console", cookie)
        again.csrf = csrf  # a form the first process rendered
        page = await again.http.get("/")
        assert page.status_code == 200 and "olga (operator)" in page.text
        assert (await again.post("/suppressions", {"address": "a@b.example"})).status_code == 303
        assert (await again.post("/logout")).status_code == 303
    assert await store.fetch("SELECT * FROM email_console_sessions") == []


async def test_the_sessions_table_keeps_only_hashes_of_tokens(db_url: str, store: SqlStore) -> None:
    async with served_console(db_url) as served:
        olga = served.client()
        await olga.login("olga")
        token = olga.http.cookies["outbox_console"]
        rows = await store.fetch("SELECT token_hash, user_name, role FROM email_console_sessions")
        assert [(bytes(r["token_hash"]), r["user_name"], r["role"]) for r in rows] == [
            (hashlib.sha256(token.encode()).digest(), "olga", "operator")]
        knows_hash = served.client()
        knows_hash.http.cookies.set("outbox_console", rows[0]["token_hash"].hex())
        assert (await knows_hash.get("/")).status_code == 303  # the hash is not a token


async def test_the_live_refresh_does_not_count_as_activity(db_url: str, store: SqlStore) -> None:
    async with served_console(db_url) as served:
        olga = served.client()
        await olga.login("olga")
        await store.execute("UPDATE email_console_sessions SET seen_at = now() - interval '100 seconds'")
        before = await store.fetch("SELECT seen_at FROM email_console_sessions")
        assert (await olga.get("/", headers={"X-Console-Refresh": "1"})).status_code == 200
        assert await store.fetch("SELECT seen_at FROM email_console_sessions") == before
        assert (await olga.get("/")).status_code == 200  # a request of the operator's own is activity
        assert await store.fetch("SELECT seen_at FROM email_console_sessions") != before
