"""One-click unsubscribe (RFC 8058, schema 28) end to end: the daemon's headers as a real SMTP server receives
them, the receiver's /unsubscribe/{token} over real HTTP on loopback, and the suppression's scope as the next
claim honours it, against a real PostgreSQL."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from email.parser import BytesHeaderParser
from typing import Any

import asyncpg
import dkim
import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from outbox_mailer.delivery_events.unsubscribe import UnsubscribeKeys, day_of
from outbox_mailer.receiver.server import Receiver, build_app
from outbox_mailer.serving.http_server import serve_http
from outbox_mailer.settings.config import Settings
from outbox_mailer.store import EventStore
from tests.console_harness import Client
from tests.in_process_daemon import Running
from tests.integration.conftest import cli, insert
from tests.integration.test_dkim_daemon import daemon_with_dkim, dns_for, signature_tags
from tests.integration.test_refused_at_insert import asyncpg_insert
from tests.provider_server import ProviderServer
from tests.smtp_server import SmtpTestServer, free_port
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio

BASE = "https://mail.example.com/lists"
KEY, OLD_KEY = "k-" + secrets.token_hex(16), "o-" + secrets.token_hex(16)
ONE_CLICK = {"content-type": "application/x-www-form-urlencoded"}
ZOE = "zoe@example.com"


def unsubscribe(keys: str = KEY) -> dict[str, Any]:
    return {"base_url": BASE + "/", "keys": keys}


@asynccontextmanager
async def receiver(db_url: str, keys: str = KEY, *, validity_days: int = 365) -> AsyncIterator[str]:
    """The receiver on loopback with these unsubscribe keys; yields its base URL."""
    settings = Settings(database_url=db_url, unsubscribe={**unsubscribe(keys), "validity_days": validity_days})
    store = await EventStore.open(db_url)
    try:
        async with httpx.AsyncClient() as http:
            app = build_app(Receiver(settings.webhooks, store, automatic_suppression=True, http=http,
                                     unsubscribe=settings.unsubscribe.signer()))
            async with serve_http(app, f"127.0.0.1:{free_port()}", setting="test") as (host, port):
                yield f"http://{host}:{port}"
    finally:
        await store.close()


def links_of(server: SmtpTestServer) -> dict[str, tuple[str | None, str | None]]:
    """Subject -> (List-Unsubscribe, List-Unsubscribe-Post) of each message the SMTP server received."""
    found = {}
    for m in server.messages:
        h = BytesHeaderParser().parsebytes(m.data)
        found[str(h["Subject"])] = (h["List-Unsubscribe"], h["List-Unsubscribe-Post"])
    return found


def local_path(link: str) -> str:
    """The receiver's path of a List-Unsubscribe URL (the public base URL is a reverse proxy's)."""
    assert link.startswith(f"<{BASE}/unsubscribe/") and link.endswith(">"), link
    return link[len(BASE) + 1:-1]


async def suppressions(conn: asyncpg.Connection) -> list[tuple[Any, ...]]:
    rows = await conn.fetch("SELECT address, scope, reason, source, delivery_id FROM email_suppressions "
                            "ORDER BY address, scope")
    return [tuple(r) for r in rows]


async def send(conn: asyncpg.Connection, running: Any, *rows: tuple[str, str | None], to: str = ZOE,
               **settings: Any) -> dict[str, dict[str, Any]]:
    """Insert a row per (dedupe key, category), the key as its subject, and run a daemon until all are final."""
    for key, category in rows:
        await asyncpg_insert(conn, key, {"subject": key, "to_addresses": [to], "unsubscribe_category": category})
    return await (await running(unsubscribe=unsubscribe(), **settings)).final(*(k for k, _ in rows))


async def test_a_row_naming_a_category_arrives_with_both_headers_and_a_row_without_with_neither(
        own_conn: asyncpg.Connection, running: Any, smtp_server: SmtpTestServer) -> None:
    rows = await send(own_conn, running, ("news", "newsletter"), ("reset", None))
    assert {k: r["status"] for k, r in rows.items()} == {"news": "sent", "reset": "sent"}
    links = links_of(smtp_server)
    link, post = links["news"]
    assert link is not None and local_path(link).startswith("/unsubscribe/")
    assert post == "List-Unsubscribe=One-Click"
    assert links["reset"] == (None, None)


@pytest.mark.parametrize(("cols", "constraint"), [
    ({"cc_addresses": ["bob@example.com"]}, "email_deliveries_unsubscribe_single_recipient"),
    ({"to_addresses": [ZOE, "bob@example.com"]}, "email_deliveries_unsubscribe_single_recipient"),
    ({"bcc_addresses": ["bob@example.com"]}, "email_deliveries_unsubscribe_single_recipient"),
    ({"unsubscribe_category": ""}, "email_deliveries_unsubscribe_category_valid"),
    ({"unsubscribe_category": "News Letter"}, "email_deliveries_unsubscribe_category_valid"),
    ({"unsubscribe_category": "x" * 65}, "email_deliveries_unsubscribe_category_valid"),
    ({"headers": {"list-unsubscribe": "<https://elsewhere.example/u>"}}, "email_deliveries_unsubscribe_headers"),
])
async def test_a_category_on_a_row_of_several_recipients_or_malformed_is_refused_at_insert(
        own_conn: asyncpg.Connection, cols: dict[str, Any], constraint: str) -> None:
    with pytest.raises(asyncpg.CheckViolationError) as raised:
        await asyncpg_insert(own_conn, "refused", {"to_addresses": [ZOE], "unsubscribe_category": "newsletter",
                                                   **cols})
    assert raised.value.constraint_name == constraint


async def test_a_one_click_post_suppresses_that_category_only_and_the_next_email_of_it_is_not_sent(
        own_conn: asyncpg.Connection, running: Any, smtp_server: SmtpTestServer, db_url: str) -> None:
    first = await send(own_conn, running, ("news-1", "newsletter"))
    link, _ = links_of(smtp_server)["news-1"]
    assert link is not None
    async with receiver(db_url) as url, httpx.AsyncClient() as http:
        reply = await http.post(url + local_path(link), content=b"List-Unsubscribe=One-Click", headers=ONE_CLICK)
    assert reply.status_code == 200, reply.text
    assert reply.headers["referrer-policy"] == "no-referrer"
    assert await suppressions(own_conn) == [(ZOE, "newsletter", "unsubscribe", "one-click", first["news-1"]["id"])]

    rows = await send(own_conn, running, ("news-2", "newsletter"), ("reset", None), ("promo", "promotions"))
    assert {k: r["status"] for k, r in rows.items()} == {"news-2": "failed", "reset": "sent", "promo": "sent"}
    assert rows["news-2"]["last_error"].startswith("suppressed: ")
    assert sorted(links_of(smtp_server)) == ["news-1", "promo", "reset"], "news-2 never reached the server"


async def test_a_multipart_one_click_post_is_accepted(own_conn: asyncpg.Connection, db_url: str) -> None:
    token = UnsubscribeKeys([KEY.encode()], validity_days=365).token(1, ZOE, "newsletter", day_of(datetime.now(UTC)))
    async with receiver(db_url) as url, httpx.AsyncClient() as http:
        reply = await http.post(f"{url}/unsubscribe/{token}", files={"List-Unsubscribe": (None, "One-Click")})
    assert reply.status_code == 200, reply.text
    assert [r[:3] for r in await suppressions(own_conn)] == [(ZOE, "newsletter", "unsubscribe")]


def signed(key: str = KEY, *, address: str = ZOE, category: str = "newsletter", days_ago: int = 0) -> str:
    day = day_of(datetime.now(UTC) - timedelta(days=days_ago))
    return UnsubscribeKeys([key.encode()], validity_days=365).token(7, address, category, day)


async def test_a_get_shows_a_form_that_posts_and_changes_nothing(own_conn: asyncpg.Connection, db_url: str) -> None:
    async with receiver(db_url) as url, httpx.AsyncClient() as http:
        reply = await http.get(f"{url}/unsubscribe/{signed()}")
    assert reply.status_code == 200
    assert '<form method="post">' in reply.text and 'name="List-Unsubscribe" value="One-Click"' in reply.text
    assert await suppressions(own_conn) == []


@pytest.mark.parametrize(("body", "headers"), [
    (b"", ONE_CLICK),
    (b"List-Unsubscribe=Yes", ONE_CLICK),
    (b"List-Unsubscribe=One-Click", {"content-type": "text/plain"}),
    (b'{"List-Unsubscribe": "One-Click"}', {"content-type": "application/json"}),
    (b"--x\r\nbroken", {"content-type": "multipart/form-data; boundary=x"}),
])
async def test_a_post_without_the_one_click_field_is_refused_and_changes_nothing(
        own_conn: asyncpg.Connection, db_url: str, body: bytes, headers: dict[str, str]) -> None:
    async with receiver(db_url) as url, httpx.AsyncClient() as http:
        reply = await http.post(f"{url}/unsubscribe/{signed()}", content=body, headers=headers)
    assert reply.status_code == 400
    assert await suppressions(own_conn) == []


async def test_a_body_over_the_bound_is_refused_unread(own_conn: asyncpg.Connection, db_url: str) -> None:
    async with receiver(db_url) as url, httpx.AsyncClient() as http:
        reply = await http.post(f"{url}/unsubscribe/{signed()}", headers=ONE_CLICK,
                                content=b"List-Unsubscribe=One-Click&pad=" + b"x" * 100_000)
    assert reply.status_code == 413
    assert await suppressions(own_conn) == []


@pytest.mark.parametrize("token", [
    pytest.param(lambda: signed()[:-3], id="truncated"),
    pytest.param(lambda: signed("f-" + secrets.token_hex(16)), id="unknown-key"),
    pytest.param(lambda: signed(days_ago=366), id="expired"),
    pytest.param(lambda: signed().replace(".", ".A", 1), id="altered-payload"),
    pytest.param(lambda: "not-a-token", id="garbage"),
])
async def test_a_forged_altered_or_expired_token_changes_nothing(
        own_conn: asyncpg.Connection, db_url: str, token: Any) -> None:
    async with receiver(db_url) as url, httpx.AsyncClient() as http:
        posted = await http.post(f"{url}/unsubscribe/{token()}", content=b"List-Unsubscribe=One-Click",
                                 headers=ONE_CLICK)
        shown = await http.get(f"{url}/unsubscribe/{token()}")
    assert (posted.status_code, shown.status_code) == (404, 404)
    assert await suppressions(own_conn) == []


async def test_a_replayed_token_answers_the_same_and_the_suppression_exists_once(
        own_conn: asyncpg.Connection, db_url: str) -> None:
    async with receiver(db_url) as url, httpx.AsyncClient() as http:
        replies = [await http.post(f"{url}/unsubscribe/{signed()}", content=b"List-Unsubscribe=One-Click",
                                   headers=ONE_CLICK) for _ in range(3)]
        metrics = (await http.get(f"{url}/metrics")).text
    assert [r.status_code for r in replies] == [200, 200, 200]
    assert [r[:3] for r in await suppressions(own_conn)] == [(ZOE, "newsletter", "unsubscribe")]
    assert 'outbox_mailer_unsubscribes_total{outcome="new"} 1.0' in metrics
    assert 'outbox_mailer_unsubscribes_total{outcome="repeated"} 2.0' in metrics


async def test_a_token_of_the_old_key_verifies_while_it_is_listed_and_not_after_it_is_removed(
        own_conn: asyncpg.Connection, db_url: str) -> None:
    old = signed(OLD_KEY, address="old@example.com")
    async with receiver(db_url, f"{KEY}") as url, httpx.AsyncClient() as http:
        removed = await http.post(f"{url}/unsubscribe/{old}", content=b"List-Unsubscribe=One-Click",
                                  headers=ONE_CLICK)
    assert removed.status_code == 404
    async with receiver(db_url, f"{KEY},{OLD_KEY}") as url, httpx.AsyncClient() as http:
        listed = await http.post(f"{url}/unsubscribe/{old}", content=b"List-Unsubscribe=One-Click",
                                 headers=ONE_CLICK)
    assert listed.status_code == 200
    assert [r[:2] for r in await suppressions(own_conn)] == [("old@example.com", "newsletter")]


async def test_an_all_mail_suppression_stops_every_category_and_a_category_one_only_its_own(
        own_conn: asyncpg.Connection, running: Any, smtp_server: SmtpTestServer, db_url: str) -> None:
    events = await EventStore.open(db_url)
    try:
        await events.suppress(ZOE, "hard_bounce", "operator", None)
        await events.suppress("bob@example.com", "manual", "operator", None, "newsletter")
    finally:
        await events.close()
    rows = await send(own_conn, running, ("z-news", "newsletter"), ("z-reset", None), ("z-promo", "promotions"))
    rows |= await send(own_conn, running, ("b-news", "newsletter"), ("b-reset", None), to="bob@example.com")
    assert {k: r["status"] for k, r in rows.items()} == {
        "z-news": "failed", "z-reset": "failed", "z-promo": "failed", "b-news": "failed", "b-reset": "sent"}
    assert sorted(links_of(smtp_server)) == ["b-reset"]


async def test_a_row_naming_a_category_fails_unsent_while_unsubscribe_is_not_configured(
        own_conn: asyncpg.Connection, running: Any, smtp_server: SmtpTestServer) -> None:
    await asyncpg_insert(own_conn, "news", {"to_addresses": [ZOE], "unsubscribe_category": "newsletter"})
    rows = await (await running()).final("news")
    assert rows["news"]["status"] == "failed"
    assert "OUTBOX_MAILER_UNSUBSCRIBE__BASE_URL" in rows["news"]["last_error"]
    assert smtp_server.messages == []


async def test_a_thousand_posts_of_random_tokens_write_nothing_and_the_receiver_stays_up(
        own_conn: asyncpg.Connection, db_url: str) -> None:
    valid = signed()
    kid = valid.split(".")[0]
    async with receiver(db_url) as url, httpx.AsyncClient() as http:
        answers = set()
        for i in range(1000):  # random parts, and half of them under the real key id
            token = (kid if i % 2 else secrets.token_urlsafe(6)) + "." + secrets.token_urlsafe(40) + "." + \
                secrets.token_urlsafe(16)
            reply = await http.post(f"{url}/unsubscribe/{token}", content=b"List-Unsubscribe=One-Click",
                                    headers=ONE_CLICK)
            answers.add(reply.status_code)
        assert answers == {404}
        assert (await http.get(f"{url}/healthz")).status_code == 200
        assert (await http.post(f"{url}/unsubscribe/{valid}", content=b"List-Unsubscribe=One-Click",
                                headers=ONE_CLICK)).status_code == 200
    assert [r[:2] for r in await suppressions(own_conn)] == [(ZOE, "newsletter")]


async def test_the_cli_suppresses_lists_and_lifts_one_scope_at_a_time(
        own_conn: asyncpg.Connection, db_url: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OUTBOX_MAILER_DATABASE_URL", db_url)
    assert await cli("suppress", "Zoe@Example.com", "--category", "newsletter") == 0
    assert await cli("suppress", ZOE) == 0
    with pytest.raises(SystemExit) as usage:
        await cli("suppress", ZOE, "--category", "Not Valid")
    assert usage.value.code == 2
    capsys.readouterr()
    assert await cli("suppressions", "--json") == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted((r["address"], r["scope"], r["reason"]) for r in listed) == [
        (ZOE, "", "manual"), (ZOE, "newsletter", "manual")]
    assert await cli("unsuppress", ZOE, "--category", "newsletter") == 0
    assert await cli("unsuppress", ZOE, "--category", "newsletter") == 1
    assert [r[:2] for r in await suppressions(own_conn)] == [(ZOE, "")], "the all-mail one stays"


async def test_the_consoles_suppressions_page_shows_each_scope(own_conn: asyncpg.Connection, operator: Client) -> None:
    await own_conn.execute("INSERT INTO email_suppressions (address, scope, reason, source) VALUES "
                           "($1, '', 'hard_bounce', 'smtp'), ($1, 'newsletter', 'unsubscribe', 'one-click')", ZOE)
    page = (await operator.get("/suppressions")).text
    assert "<td>category newsletter</td>" in page and "<td>all mail</td>" in page
    assert (await operator.post(f"/suppressions/{ZOE.replace('@', '%40')}/delete")).status_code == 303
    assert await suppressions(own_conn) == [], "the console's delete lifts every scope of the address"


async def test_with_dkim_on_both_headers_are_signed_and_the_received_message_verifies(
        db_url: str, store: SqlStore, smtp_server: SmtpTestServer) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    await insert(store, "news", to_addresses=[ZOE], unsubscribe_category="newsletter")
    async with daemon_with_dkim(db_url, smtp_server, store, key, unsubscribe=unsubscribe()) as r:
        assert (await r.final("news"))["news"]["status"] == "sent"
    [message] = smtp_server.accepted
    assert b"List-Unsubscribe-Post: List-Unsubscribe=One-Click" in message.data
    [tags] = signature_tags(message.data)
    assert {b"list-unsubscribe", b"list-unsubscribe-post"} <= set(tags[b"h"].split(b":"))
    assert dkim.verify(message.data, dnsfunc=dns_for(key))


async def test_through_a_provider_api_the_request_carries_both_header_fields(
        resend: Any, provider_server: ProviderServer, store: SqlStore) -> None:
    await insert(store, "news", to_addresses=[ZOE], unsubscribe_category="newsletter")
    daemon = await resend(provider_server, batch=False, unsubscribe=unsubscribe())
    rows = await Running(daemon, store).final("news")
    assert rows["news"]["status"] == "sent"
    [request] = provider_server.sends()
    headers = json.loads(request.body)["headers"]
    assert local_path(headers["List-Unsubscribe"]).startswith("/unsubscribe/")
    assert headers["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
