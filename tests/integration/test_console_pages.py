"""The console's pages over real HTTP against real PostgreSQL: filters and keyset pages, keys of any
character in URLs, 400 for malformed filters and 404 for unknown keys, hostile content escaped, the
HTML body only in a sandbox, the overview's counts."""

from __future__ import annotations

import html
import json
import re
from urllib.parse import quote

import pytest

from outbox_mailer.console.web import key_url
from tests.console_harness import Client
from tests.integration.conftest import insert
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio

HOSTILE_KEYS = ("a/b", "100%", "what?x=1", "frag#ment", "two words", "ключ-é-✉", "..", ".", "~", "a/../b", "%2F", "+plus",
                "&amp;<x>")


def keys_on(page: str) -> list[str]:
    """The dedupe keys of a list page, in order."""
    return [html.unescape(k) for k in re.findall(r'<td><a href="/emails/[^"]+">([^<]*)</a></td>', page)]


async def set_status(store: SqlStore, key: str, status: str, **more: str) -> None:
    extra = "".join(f", {column} = '{value}'" for column, value in more.items())
    sent = ", sent_at = now()" if status == "sent" else ""
    await store.execute(f"UPDATE email_deliveries SET status = '{status}'{sent}{extra} WHERE dedupe_key = $1", key)


async def test_keys_of_any_character_reach_their_page_and_their_actions(operator: Client, store: SqlStore) -> None:
    for key in HOSTILE_KEYS:
        await insert(store, key)
        await set_status(store, key, "failed")
    listed = keys_on((await operator.get("/emails")).text)
    assert sorted(listed) == sorted(HOSTILE_KEYS)
    for key in HOSTILE_KEYS:
        url = key_url(key)  # /emails/<percent-encoded key>, or /emails/~?key=.. for the dot segments
        assert url == "/emails/" + quote(key, safe="") or key in (".", "..")
        page = await operator.get(url)
        assert page.status_code == 200, key
        assert f'<span class="key">{html.escape(key)}</span>' in page.text, key
        action = re.search(r'<form method="post" action="([^"]+)"', page.text.split('id="state"')[1]).group(1)
        assert html.unescape(action) == key_url(key, "/retry")
        assert (await operator.post(html.unescape(action))).status_code == 303, key
    assert {r["status"] for r in await store.status(list(HOSTILE_KEYS))} == {"pending"}
    assert (await operator.get("/emails/" + quote("no such key/", safe=""))).status_code == 404
    assert (await operator.post("/emails/" + quote("no such key", safe="") + "/retry")).status_code == 404
    assert (await operator.get("/emails/%FF%FE")).status_code == 400  # not UTF-8


@pytest.mark.parametrize("query", [
    "status=bogus", "event=opened", "order=sideways", "created_after=yesterday", "created_before=2026-13-01",
    "after=123", "after=x.y", "recipient=%00", "key=" + "k" * 256, "transport=" + "t" * 65, "created_after=0001-01-01",
])
async def test_malformed_filters_get_400(operator: Client, query: str) -> None:
    response = await operator.get("/emails?" + query)
    assert response.status_code == 400, query
    assert query.split("=")[0] in response.text


async def test_filters_combine_and_pages_walk_every_row_once(operator: Client, store: SqlStore) -> None:
    for i in range(120):
        await insert(store, f"order-{i:03}", transport="bulk" if i % 2 else None,
                     to_addresses=[f"Person {i} <p{i % 7}@example.com>"])
        if i % 3 == 0:
            await set_status(store, f"order-{i:03}", "failed")
    await store.execute("UPDATE email_deliveries SET created_at = now() - make_interval(secs => 1000 - id)")
    seen, url = [], "/emails?key=order-"
    while url:
        page = (await operator.get(url)).text
        seen += keys_on(page)
        found = re.search(r'<a href="([^"]+)" rel="next">', page)
        url = html.unescape(found.group(1)) if found else None
    assert seen == [f"order-{i:03}" for i in reversed(range(120))]  # newest first, each once
    oldest = keys_on((await operator.get("/emails?order=oldest")).text)
    assert oldest[:3] == ["order-000", "order-001", "order-002"]
    both = keys_on((await operator.get("/emails?status=failed&transport=bulk&recipient=P3%40EXAMPLE.com")).text)
    expected = [f"order-{i:03}" for i in reversed(range(120)) if i % 3 == 0 and i % 2 and i % 7 == 3]
    assert both == expected and expected
    default = keys_on((await operator.get("/emails?transport=smtp&status=failed")).text)
    assert default == [f"order-{i:03}" for i in reversed(range(120)) if i % 3 == 0 and i % 2 == 0]


async def test_filter_text_is_never_sql(operator: Client, store: SqlStore) -> None:
    await insert(store, "plain")
    for query in ("key=%27%20OR%201%3D1%20--", "recipient=%25", "recipient=_", "transport=%27%3B%20DROP%20TABLE%20x",
                  "key=%25", "recipient=to%40example"):
        response = await operator.get("/emails?" + query)
        assert response.status_code == 200 and keys_on(response.text) == [], query
    assert keys_on((await operator.get("/emails?recipient=TO%40example.com")).text) == ["plain"]


async def test_hostile_content_is_escaped_and_the_html_body_is_sandboxed(operator: Client, store: SqlStore) -> None:
    script = "<script>window.pwned=1</script>"
    await insert(store, "evil", subject=f"Hi {script}", to_addresses=['"<img src=x onerror=alert(1)>" <v@example.com>'],
                 html_body=f'<p>hello</p>{script}<img src="https://tracker.example/p.gif"><form action="https://x.example">'
                           '<a href="javascript:alert(1)">x</a>',
                 headers={"X-Note": "<b onmouseover=alert(1)>"}, metadata={"note": script})
    await set_status(store, "evil", "failed", last_error="<svg onload=alert(1)>")
    page = (await operator.get("/emails/evil")).text
    assert script not in page and "<img src=x" not in page and "<svg onload" not in page and "<b onmouseover" not in page
    assert html.escape(script) in page or "&lt;script&gt;" in page
    assert re.findall(r"<script[^>]*>", page) == ['<script src="/static/refresh.js" defer>']  # ours alone
    assert '<iframe class="html" sandbox=""' in page and "tracker.example" not in page
    listing = (await operator.get("/emails")).text
    assert script not in listing and "<img src=x" not in listing
    preview = await operator.get("/emails/evil/html")
    csp = preview.headers["content-security-policy"]
    assert preview.status_code == 200 and csp.startswith("sandbox;") and "img-src data:;" in csp
    assert "script-src" not in csp and "default-src 'none'" in csp  # no script of any origin
    remote = await operator.get("/emails/evil/html?remote=1")
    assert "img-src data: https: http:" in remote.headers["content-security-policy"]
    assert remote.headers["content-security-policy"].startswith("sandbox;")


async def test_email_page_shows_attempts_events_content_and_composed_headers(operator: Client, store: SqlStore) -> None:
    await insert(store, "shown", subject="Receipt 42", text_body="Thanks!", html_body="<p>Thanks!</p>")
    row = (await store.status(["shown"]))[0]
    await store.execute(
        "INSERT INTO email_delivery_attempts (delivery_id, attempt, started_at, finished_at, outcome, reply_code, "
        "reply, transport, worker) VALUES ($1, 1, now() - interval '2 s', now(), 'transient', 451, "
        "'451 4.7.1 try later', 'smtp', 'host:1')", row["id"])
    await store.execute(
        "INSERT INTO email_delivery_events (delivery_id, provider, provider_event_id, kind, bounce_class, recipient, "
        "occurred_at, detail) VALUES ($1, 'resend', 'ev-1', 'bounced', 'soft', 'to@example.com', now(), $2::jsonb)",
        row["id"], json.dumps({"reason": "<mailbox full>"}))
    page = (await operator.get("/emails/shown")).text
    assert "#1 transient" in page and "451 4.7.1 try later" in page and "2.0" in page
    assert "bounced (soft)" in page and "&lt;mailbox full&gt;" in page
    assert "Subject: Receipt 42" in page and "From: &#34;App&#34; &lt;app@example.com&gt;" in page
    assert "Thanks!" in page and "/emails/shown/html" in page


async def test_overview_counts_rows_by_status_and_transport(operator: Client, store: SqlStore) -> None:
    for i in range(5):
        await insert(store, f"o{i}", transport="api" if i < 2 else None)
    await set_status(store, "o0", "failed")
    await set_status(store, "o3", "in_doubt")
    page = (await operator.get("/")).text
    assert '<a href="/emails?status=failed&amp;transport=api">1</a>' in page
    assert '<a href="/emails?status=pending&amp;transport=smtp">2</a>' in page
    assert '<a href="/in-doubt">1</a>' in page
    assert 'data-refresh="10"' in page and '<script src="/static/refresh.js" defer></script>' in page
    in_doubt = (await operator.get("/in-doubt")).text
    assert keys_on(in_doubt) == ["o3"] and "Resolve as sent" in in_doubt
