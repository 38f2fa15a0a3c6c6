"""Smaller doors of the console, over real HTTP against real PostgreSQL: the bulk cap on a direct POST, the
Host and the scheme in the origin check (DNS rebinding), cookies behind a TLS proxy, NUL characters and
out-of-range cursors (400, not 500), and remote content that cannot prefetch."""

from __future__ import annotations

import pytest

from outbox_mailer.console.content import inert_links
from outbox_mailer.store.console import MAX_BULK
from tests.console_harness import PASSWORD, served_console
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio


async def test_a_direct_bulk_post_beyond_the_cap_is_refused_and_changes_nothing(db_url: str,
                                                                               store: SqlStore) -> None:
    await store.execute("INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body) "
                        "SELECT 'b' || g, '{to@example.com}', 's', 'b' FROM generate_series(1, $1::int) g",
                        MAX_BULK + 1)
    await store.execute("UPDATE email_deliveries SET status = 'failed', last_error = 'x'")
    async with served_console(db_url) as served:
        olga = served.client()
        await olga.login("olga")
        await olga.get("/emails")
        refused = await olga.post("/emails/bulk-retry", {"key": "b", "expected_count": str(MAX_BULK + 1)})
        assert refused.status_code == 400 and str(MAX_BULK) in refused.text
    rows = await store.fetch("SELECT status, count(*) AS n FROM email_deliveries GROUP BY status")
    assert [(r["status"], r["n"]) for r in rows] == [("failed", MAX_BULK + 1)]
    assert await store.fetch("SELECT * FROM email_operator_actions") == []


async def test_a_host_not_allowed_gets_400_and_a_post_from_another_scheme_403(db_url: str, store: SqlStore) -> None:
    async with served_console(db_url) as served:
        port = served.base.rsplit(":", 1)[1]
        rebound = served.client(Host=f"rebound.example:{port}")  # a name of the attacker's resolving to 127.0.0.1
        assert (await rebound.get("/login")).status_code == 400
        response = await rebound.post("/login", {"username": "olga", "password": PASSWORD},
                                      origin=f"http://rebound.example:{port}")
        assert response.status_code == 400 and "outbox_console" not in response.headers.get("set-cookie", "")
        olga = served.client()
        await olga.login("olga")
        assert (await olga.post("/suppressions", {"address": "a@b.example"},
                                origin=served.base.replace("http:", "https:"))).status_code == 403
        assert (await served.client(Host=f"localhost:{port}").get("/login")).status_code == 200
    async with served_console(db_url, console={"allowed_hosts": "console.example"}) as served:
        assert (await served.client().get("/login")).status_code == 400  # 127.0.0.1 is not named
        assert (await served.client(Host="console.example").get("/login")).status_code == 200
    assert await store.fetch("SELECT * FROM email_suppressions") == []


async def test_behind_a_tls_proxy_the_cookies_are_secure_host_only(db_url: str) -> None:
    async with served_console(db_url, console={"forwarded_for_proxies": "127.0.0.1"}) as served:
        proxied = served.client(**{"X-Forwarded-Proto": "https"})
        page = await proxied.get("/login")
        form_cookie = page.headers["set-cookie"]
        assert form_cookie.startswith("__Host-outbox_console_form=") and "Secure" in form_cookie
        nonce = form_cookie.split(";")[0]
        signed = await proxied.http.post("/login", headers={"Origin": served.base.replace("http:", "https:"),
                                                            "Cookie": nonce},
                                         data={"username": "olga", "password": PASSWORD, "csrf_token": proxied.csrf})
        assert signed.status_code == 303
        cookies = signed.headers.get_list("set-cookie")
        session = next(c for c in cookies if c.startswith("__Host-outbox_console="))
        assert "Secure" in session and "Path=/" in session and "Domain" not in session
        # without the proxy's word the scheme is http, and that Origin is another console's
        again = await served.client().post("/login", {"username": "olga", "password": PASSWORD},
                                           origin=served.base.replace("http:", "https:"))
        assert again.status_code == 403


async def test_nul_characters_and_out_of_range_cursors_get_400(db_url: str) -> None:
    async with served_console(db_url) as served:
        anonymous = served.client()
        await anonymous.get("/login")
        assert (await anonymous.post("/login", {"username": "ol\x00ga", "password": PASSWORD})).status_code == 400
        olga = served.client()
        await olga.login("olga")
        for path in ("/emails/a%00b", "/emails?key=a%00b", "/suppressions?q=%00", "/emails?after=1.9999999999999999999",
                     "/in-doubt?after=1.9223372036854775808"):
            assert (await olga.get(path)).status_code == 400, path
        await olga.get("/suppressions")
        assert (await olga.post("/suppressions", {"address": "a\x00@b.example"})).status_code == 400


def test_link_elements_other_than_stylesheets_are_made_inert() -> None:
    html = ('<head>\r\n<link rel="stylesheet" href="https://c/s.css"><LINK Rel="prefetch" href="https://c/p">\n'
            '<link rel=dns-prefetch href=//c><link rel="preload stylesheet" href=x /><link href=y></head>')
    assert inert_links(html) == (
        '<head>\r\n<link rel="stylesheet" href="https://c/s.css"><x-LINK Rel="prefetch" href="https://c/p">\n'
        '<x-link rel=dns-prefetch href=//c><x-link rel="preload stylesheet" href=x /><x-link href=y></head>')
