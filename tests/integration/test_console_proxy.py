"""The console behind an authenticating proxy, over real HTTP: every proxied request names its user again
(no cookie to outlive the header, roles read again), trusted networks wider than one host are refused
at start-up unless a setting allows them, and the console serves on a Unix socket where only the proxy
connects."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from outbox_mailer.settings.config import Settings
from tests.console_harness import served_console
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio
PROXY = {"trusted_proxy_header": "X-Forwarded-User", "trusted_proxies": "127.0.0.1"}


async def test_a_proxied_request_gets_no_cookie_and_its_user_is_read_again_each_time(db_url: str,
                                                                                     store: SqlStore) -> None:
    async with served_console(db_url, console=PROXY) as served:
        proxied = served.client(**{"X-Forwarded-User": "olga"})
        page = await proxied.get("/")
        assert "olga (operator)" in page.text and "set-cookie" not in page.headers
        await store.execute("UPDATE email_console_users SET role = 'viewer' WHERE name = 'olga'")
        assert "olga (viewer)" in (await proxied.get("/")).text  # demoted: at once
        await store.execute("DELETE FROM email_console_users WHERE name = 'olga'")
        assert "olga (viewer)" in (await proxied.get("/")).text  # removed: PROXY_ROLE's, not operator
        bare = served.client()
        bare.http.cookies.update(proxied.http.cookies)
        assert (await bare.get("/")).status_code == 303  # nothing signs in without the header


async def test_a_proxied_user_acts_with_the_csrf_token_of_its_page(db_url: str, store: SqlStore) -> None:
    async with served_console(db_url, console=PROXY) as served:
        proxied = served.client(**{"X-Forwarded-User": "olga"})
        await proxied.get("/suppressions")
        assert (await proxied.post("/suppressions", {"address": "a@b.example"})).status_code == 303
        assert (await proxied.post("/suppressions", {"address": "c@b.example", "csrf_token": "forged"})
                ).status_code == 403
        assert [r["address"] for r in await store.fetch("SELECT address FROM email_suppressions")] == ["a@b.example"]


def test_a_trusted_network_wider_than_one_host_is_refused_unless_allowed() -> None:
    for setting, extra in (("trusted_proxies", {"trusted_proxy_header": "X-Forwarded-User"}),
                           ("forwarded_for_proxies", {})):
        with pytest.raises(ValidationError, match="ALLOW_WIDE_PROXY_NETWORK"):
            Settings(console={setting: "0.0.0.0/0", **extra, "proxy_role": "operator"})
        with pytest.raises(ValidationError, match="more than one address"):
            Settings(console={setting: "127.0.0.1, 10.0.0.0/24", **extra})
        wide = Settings(console={setting: "10.0.0.0/24", **extra, "allow_wide_proxy_network": True})
        assert getattr(wide.console, setting) == "10.0.0.0/24"
        assert getattr(Settings(console={setting: "10.0.0.7, ::1", **extra}).console, setting) == "10.0.0.7, ::1"


async def test_the_console_serves_on_a_unix_socket_and_takes_the_proxy_header_there(db_url: str,
                                                                                     tmp_path: Path) -> None:
    path = tmp_path / "console.sock"
    cfg = {"socket": str(path), "trusted_proxy_header": "X-Forwarded-User"}
    async with served_console(db_url, console=cfg):
        assert path.stat().st_mode & 0o777 == 0o660  # the console's user and group only
        async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=str(path)),
                                     base_url="http://localhost") as client:
            page = await client.get("/", headers={"X-Forwarded-User": "olga"})
            assert page.status_code == 200 and "olga (operator)" in page.text
            assert (await client.get("/")).status_code == 303  # no header: nobody
    assert not path.exists()
