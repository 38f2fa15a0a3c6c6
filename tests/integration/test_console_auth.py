"""The console's doors, over real HTTP against real PostgreSQL: sign-in and its throttle, sessions and
their cookie, CSRF and origin checks, roles, the trusted proxy, the security headers of every page."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from outbox_mailer.console.app import build_app
from outbox_mailer.console.throttle import REFUSE_AFTER, SLOW_AFTER
from outbox_mailer.console.web import Console
from outbox_mailer.settings.config import Settings
from outbox_mailer.store.console import ConsoleStore
from tests.console_harness import PASSWORD, Served, password_hash, served_console
from tests.integration.conftest import insert
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio


@pytest.fixture
async def served(db_url: str) -> AsyncIterator[Served]:
    async with served_console(db_url) as s:
        yield s


async def test_pages_need_a_signed_in_user(served: Served) -> None:
    client = served.client()
    for path in ("/", "/emails", "/emails/x", "/in-doubt", "/suppressions"):
        response = await client.get(path)
        assert response.status_code == 303 and response.headers["location"] == "/login", path
    response = await client.post("/emails/x/retry", origin="same", csrf=False)
    assert response.status_code == 403


async def test_sign_in_sets_a_strict_http_only_cookie_and_sign_out_ends_the_session(served: Served) -> None:
    client = served.client()
    response = await client.login("olga")
    assert response.status_code == 303 and response.headers["location"] == "/"
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    assert "Secure" not in cookie  # served on loopback
    token = client.http.cookies["outbox_console"]
    assert (await client.get("/")).status_code == 200
    assert (await client.post("/logout")).status_code == 303
    stale = served.client()
    stale.http.cookies.set("outbox_console", token)
    assert (await stale.get("/")).status_code == 303  # the old cookie signs nobody in


async def test_removing_a_user_or_changing_its_role_ends_its_sessions(served: Served, store: SqlStore) -> None:
    olga, victor = served.client(), served.client()
    await olga.login("olga")
    await victor.login("victor")
    assert await served.store.remove_user("olga")
    assert (await olga.get("/")).status_code == 303  # signed out at once, not at the idle timeout
    await store.execute("UPDATE email_console_users SET role = 'operator' WHERE name = 'victor'")
    assert (await victor.get("/")).status_code == 303  # a new role needs a new sign-in
    assert (await victor.login("victor")).status_code == 303
    assert "victor (operator)" in (await victor.get("/")).text


async def test_wrong_password_and_unknown_user_get_the_same_answer(served: Served) -> None:
    wrong = await served.client().login("olga", "not the password at all")
    nobody = await served.client().login("nobody-here", "not the password at all")
    assert wrong.status_code == nobody.status_code == 401
    assert "Wrong user name or password." in wrong.text
    token = re.compile(r'name="csrf_token" value="[^"]+"')
    assert token.sub("", wrong.text) == token.sub("", nobody.text)


async def test_repeated_failures_slow_then_refuse_even_the_right_password(served: Served) -> None:
    client = served.client()
    times = []
    for _ in range(REFUSE_AFTER):
        started = time.monotonic()
        assert (await client.login("olga", "wrong password 123")).status_code == 401
        times.append(time.monotonic() - started)
    assert min(times[SLOW_AFTER:]) >= 0.05 > 0  # the console was started with 0.05 s of slowing
    refused = await client.login("olga")
    assert refused.status_code == 429 and "Too many failed sign-ins" in refused.text
    # a new session does not reset the count, and the address's failures refuse another user too
    assert (await served.client().login("olga")).status_code == 429
    assert (await served.client().login("victor")).status_code == 429


async def test_login_without_csrf_token_or_from_another_origin_is_refused(served: Served) -> None:
    client = served.client()
    await client.get("/login")
    no_token = await client.post("/login", {"username": "olga", "password": PASSWORD}, csrf=False)
    other_origin = await client.post("/login", {"username": "olga", "password": PASSWORD},
                                     origin="https://evil.example")
    no_origin = await client.post("/login", {"username": "olga", "password": PASSWORD}, origin=None)
    assert no_token.status_code == other_origin.status_code == no_origin.status_code == 403
    assert "outbox_console=" not in no_token.headers.get("set-cookie", "")


async def test_cross_origin_or_tokenless_action_is_refused_and_changes_nothing(served: Served, store: SqlStore) -> None:
    await insert(store, "k1")
    await store.execute("UPDATE email_deliveries SET status = 'failed', last_error = 'x' WHERE dedupe_key = 'k1'")
    client = served.client()
    await client.login("olga")
    assert (await client.post("/emails/k1/retry", origin="https://evil.example")).status_code == 403
    assert (await client.post("/emails/k1/retry", csrf=False)).status_code == 403
    assert (await client.post("/emails/k1/retry", {"csrf_token": "forged"})).status_code == 403
    assert (await store.status(["k1"]))[0]["status"] == "failed"
    assert (await client.post("/emails/k1/retry")).status_code == 303  # the same request, done right
    assert (await store.status(["k1"]))[0]["status"] == "pending"


async def test_a_viewer_sees_no_action_and_its_post_gets_403(served: Served, store: SqlStore) -> None:
    await insert(store, "k1")
    await store.execute("UPDATE email_deliveries SET status = 'failed', last_error = 'x' WHERE dedupe_key = 'k1'")
    client = served.client()
    await client.login("victor")
    page = await client.get("/emails/k1")
    assert page.status_code == 200 and "/emails/k1/retry" not in page.text
    assert "bulk=retry" not in (await client.get("/emails")).text
    for path, data in (("/emails/k1/retry", {}), ("/emails/k1/cancel", {}), ("/emails/k1/resolve", {"as": "sent"}),
                       ("/emails/bulk-retry", {"expected_count": "1"}), ("/suppressions", {"address": "a@b.example"}),
                       ("/suppressions/a%40b.example/delete", {})):
        assert (await client.post(path, data)).status_code == 403, path
    assert (await client.get("/emails?bulk=retry")).status_code == 403
    assert (await store.status(["k1"]))[0]["status"] == "failed"
    assert await store.fetch("SELECT * FROM email_suppressions") == []
    assert await store.fetch("SELECT * FROM email_operator_actions") == []


async def test_every_page_carries_the_security_headers(served: Served) -> None:
    client = served.client()
    await client.login("olga")
    for path in ("/login", "/", "/emails", "/in-doubt", "/suppressions", "/emails/missing", "/static/console.css"):
        response = await client.get(path)
        csp = response.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp and "unsafe-inline" not in csp, path
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "same-origin"


async def test_trusted_proxy_header_is_honoured_only_from_trusted_addresses(db_url: str) -> None:
    proxy = {"trusted_proxy_header": "X-Forwarded-User", "trusted_proxies": "127.0.0.1"}
    async with served_console(db_url, console=proxy) as s:
        page = await s.client(**{"X-Forwarded-User": "paula"}).get("/")
        assert page.status_code == 200 and "paula (viewer)" in page.text  # PROXY_ROLE's default
        page = await s.client(**{"X-Forwarded-User": "olga"}).get("/")
        assert "olga (operator)" in page.text  # a known user keeps the role of email_console_users
    async with served_console(db_url, users=(), console={**proxy, "proxy_role": "operator"}) as s:
        assert "paula (operator)" in (await s.client(**{"X-Forwarded-User": "paula"}).get("/")).text
    async with served_console(db_url, users=(), console={**proxy, "trusted_proxies": "10.0.0.1"}) as s:
        # the proxy is elsewhere: a loopback client naming a user signs nobody in
        assert (await s.client(**{"X-Forwarded-User": "olga"}).get("/")).status_code == 303
    async with served_console(db_url, users=()) as s:  # no proxy configured: the header means nothing
        assert (await s.client(**{"X-Forwarded-User": "olga"}).get("/")).status_code == 303


async def test_sessions_end_after_idle_time_and_after_their_lifetime(db_url: str, store: SqlStore) -> None:
    async with served_console(db_url, console={"session_seconds": 100, "idle_seconds": 60}) as served:
        idle, old = served.client(), served.client()
        await idle.login("olga")
        await old.login("olga")
        assert (await idle.get("/")).status_code == (await old.get("/")).status_code == 200
        await store.execute("UPDATE email_console_sessions SET seen_at = now() - interval '61 seconds' "
                            "WHERE started_at = (SELECT min(started_at) FROM email_console_sessions)")
        await store.execute("UPDATE email_console_sessions SET started_at = now() - interval '101 seconds' "
                            "WHERE seen_at > now() - interval '60 seconds'")
        assert (await idle.get("/")).status_code == 303  # idle 61 s
        assert (await old.get("/")).status_code == 303  # signed in 101 s ago, though busy
        assert await store.fetch("SELECT * FROM email_console_sessions") == []  # ended, not kept


async def test_the_cookie_is_secure_when_the_console_listens_beyond_loopback(db_url: str) -> None:
    store = await ConsoleStore.open(db_url)
    try:
        await store.add_user("olga", "operator", password_hash())
        settings = Settings(database_url=db_url, console={"address": "0.0.0.0:8025",
                                                          "allowed_hosts": "console.example"})
        base = "https://console.example"
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=build_app(Console(settings, store))),
                                     base_url=base, headers={"Origin": base}) as client:
            login = await client.get("/login")
            assert "Secure" in login.headers["set-cookie"]
            token = re.search(r'name="csrf_token" value="([^"]+)"', login.text).group(1)  # type: ignore[union-attr]
            signed = await client.post("/login", data={"username": "olga", "password": PASSWORD, "csrf_token": token})
            assert signed.status_code == 303 and "Secure" in signed.headers["set-cookie"]
    finally:
        await store.close()
