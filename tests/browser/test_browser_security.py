"""The console's defences in a real browser (chromium) with its real Content-Security-Policy: an email
whose every field is hostile (script, event handlers, javascript: links, remote resources of every
kind, a form) runs no script and makes no request to a canary HTTP server while its page and its HTML
preview are open, clicked or not; and a viewer sees no action and gets 403 for a crafted POST that
carries its own session and CSRF token, which changes nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from playwright.async_api import expect

from outbox_mailer.console.web import key_url
from tests.browser.browser_harness import Canary, canary_server, csrf_of, sign_in
from tests.console_harness import Served
from tests.integration.conftest import insert
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio

PWNED = "() => typeof window.pwned"  # what a script of the email would have set


def hostile_html(c: str) -> str:
    """An HTML body that tries every way to run script or reach the canary ``c`` (a URL)."""
    return f"""<!doctype html><html><head>
<meta http-equiv="refresh" content="0;url={c}/refresh">
<base href="{c}/base/">
<link rel="stylesheet" href="{c}/style.css"><link rel="prefetch" href="{c}/prefetch">
<link rel="preload" as="image" href="{c}/preload.png"><link rel="icon" href="{c}/icon.png">
<style>@import url("{c}/import.css"); p {{ background: url("{c}/bg.png") }}
@font-face {{ font-family: f; src: url("{c}/font.woff") }} h1 {{ font-family: f }}</style>
<script>window.pwned = "inline";</script><script src="{c}/script.js"></script>
</head><body onload="window.pwned = 'body'">
<h1 id="greeting">Hello from a hostile email</h1>
<p>Your receipt.</p>
<img src="{c}/pixel.gif" alt="pixel"><img srcset="{c}/srcset.png 1x" alt="">
<img src="x" onerror="window.pwned = 'onerror'" alt=""><svg onload="window.pwned = 'svg'"></svg>
<div style="background-image: url('{c}/inline-bg.png')">styled</div>
<picture><source srcset="{c}/source.png"><img alt=""></picture>
<video poster="{c}/poster.png" src="{c}/video.mp4" autoplay></video><audio src="{c}/audio.mp3" autoplay></audio>
<iframe src="{c}/frame"></iframe><object data="{c}/object"></object><embed src="{c}/embed">
<a id="js" href="javascript:window.pwned = 'link'">javascript link</a>
<a href="{c}/ping-target" ping="{c}/ping">a link that is not followed</a>
<form action="{c}/form" method="post"><input name="q" value="secret"><button id="send">Send</button></form>
<input type="image" src="{c}/input.png" alt="go">
</body></html>"""


async def hostile_row(store: SqlStore, c: str) -> str:
    key = f"evil-<img src={c}/key.gif onerror=window.pwned=1>"
    script = f'<script>window.pwned = "field"</script><script src="{c}/field.js"></script>'
    await insert(store, key, subject=f"Hi {script}<img src={c}/subject.gif onerror=window.pwned=2>",
                 to_addresses=[f'"<img src={c}/name.gif onerror=window.pwned=3>" <v@example.com>'],
                 reply_to='"<svg onload=window.pwned=4>" <r@example.com>',
                 headers={"X-Note": f"<img src={c}/header.gif onerror=window.pwned=5>"},
                 metadata={"note": script, "link": "javascript:window.pwned=6", "img": f"<img src={c}/meta.gif>"},
                 text_body=f"{script} <a href=\"javascript:window.pwned=7\">x</a>", html_body=hostile_html(c))
    await store.execute("UPDATE email_deliveries SET status = 'failed', attempts = 1, "
                        "last_error = $2 WHERE dedupe_key = $1", key, f"<svg onload=window.pwned=8><img src={c}/e.gif>")
    [row] = await store.status([key])
    await store.execute(
        "INSERT INTO email_delivery_attempts (delivery_id, attempt, started_at, finished_at, outcome, reply_code, "
        "reply, transport, worker) VALUES ($1, 1, now(), now(), 'permanent', 550, $2, 'smtp', $3)",
        row["id"], f"550 <img src={c}/reply.gif onerror=window.pwned=9>", f"<script src={c}/worker.js></script>")
    await store.execute(
        "INSERT INTO email_delivery_events (delivery_id, provider, provider_event_id, kind, recipient, occurred_at, "
        "detail) VALUES ($1, $2, 'ev-1', 'complained', $3, now(), $4::jsonb)", row["id"],
        f"<img src={c}/provider.gif>", "<script>window.pwned=10</script>@example.com",
        json.dumps({"html": f"<iframe src={c}/detail></iframe>"}))
    return key


async def frame_of(page: Any) -> Any:
    frame = await (await page.locator("iframe.html").element_handle()).content_frame()
    await frame.wait_for_load_state()
    return frame


async def settled(page: Any, canary: Canary) -> list[str]:
    """The canary's requests once the page has had no network activity for 0.5 s."""
    await page.wait_for_load_state("networkidle")
    return canary.requests


async def test_a_hostile_email_runs_no_script_and_reaches_no_server(page: Any, console: Served,
                                                                    store: SqlStore) -> None:
    with canary_server() as canary:
        key = await hostile_row(store, canary.url)
        elsewhere: list[str] = []  # requests the browser completed to any server but the console
        page.context.on("requestfinished", lambda r: r.url.startswith(console.base) or elsewhere.append(r.url))
        await sign_in(page, "olga")
        await page.goto(key_url(key))

        assert await page.locator("iframe.html").get_attribute("sandbox") == ""  # and the preview's CSP: sandbox
        frame = await frame_of(page)
        await expect(frame.locator("#greeting")).to_have_text("Hello from a hostile email")  # the body is shown
        await expect(page.locator("h1 .key")).to_have_text(key)  # as text
        await expect(page.locator("table.fields")).to_contain_text('<script>window.pwned = "field"</script>')
        assert await settled(page, canary) == []
        assert await page.evaluate(PWNED) == "undefined" and await frame.evaluate(PWNED) == "undefined"
        hostile = await page.evaluate("""() => document.querySelectorAll(
            'img, iframe:not(.html), object, embed, svg:not(.chart svg), [onerror], [onload], a[href^="javascript"]'
        ).length""")
        assert hostile == 0
        assert await page.evaluate("() => [...document.scripts].map(s => s.getAttribute('src'))") == [
            "/static/refresh.js"]

        # what a curious operator clicks in the frame: the javascript: link and the form's button
        await frame.locator("#js").click()
        await frame.locator("#send").click()
        assert await settled(page, canary) == []
        assert await page.evaluate(PWNED) == "undefined" and await frame.evaluate(PWNED) == "undefined"
        assert page.url.endswith(key_url(key))  # no navigation of the page

        # the preview's own URL, opened directly: sandboxed by its CSP too
        preview = await page.context.new_page()
        await preview.goto(key_url(key, "/html"))
        await expect(preview.locator("#greeting")).to_have_text("Hello from a hostile email")
        assert await settled(preview, canary) == []
        assert await preview.evaluate(PWNED) == "undefined"
        await preview.close()
        assert elsewhere == []  # nothing but the console was asked for anything

        # the canary does see requests: remote content, asked for, loads images, still no script or form
        await page.get_by_role("link", name="Load remote content for this email").click()
        frame = await frame_of(page)
        await expect(frame.locator("#greeting")).to_be_visible()
        await page.wait_for_load_state("networkidle")
        asked = {path.split("?")[0] for path in canary.requests}
        assert "/pixel.gif" in asked
        assert not asked & {"/script.js", "/field.js", "/frame", "/object", "/embed", "/form", "/refresh", "/prefetch",
                            "/subject.gif", "/name.gif", "/header.gif", "/meta.gif", "/key.gif", "/reply.gif"}
        await frame.locator("#send").click()
        await page.wait_for_load_state("networkidle")
        assert "/form" not in canary.requests
        assert await page.evaluate(PWNED) == "undefined" and await frame.evaluate(PWNED) == "undefined"
    assert (await store.status([key]))[0]["status"] == "failed"


async def test_a_viewer_sees_no_action_and_a_crafted_post_gets_403_and_changes_nothing(
        page: Any, console: Served, store: SqlStore) -> None:
    for key, status in (("f-1", "failed"), ("p-1", "pending"), ("d-1", "in_doubt")):
        await insert(store, key)
        await store.execute("UPDATE email_deliveries SET status = $2 WHERE dedupe_key = $1", key, status)
    await store.execute("INSERT INTO email_suppressions (address, reason, source) "
                        "VALUES ('blocked@example.com', 'manual', 'operator')")
    await sign_in(page, "victor")

    async def buttons() -> list[str]:
        return [b.strip() for b in await page.get_by_role("button").all_text_contents()]

    await page.goto("/emails")
    assert await buttons() == ["Sign out", "Filter"]
    assert await page.get_by_role("link", name="retry the failed, cancelled and in-doubt ones").count() == 0
    for key in ("f-1", "p-1", "d-1"):
        await page.goto(f"/emails/{key}")
        assert await buttons() == ["Sign out"], key
    await page.goto("/in-doubt")
    await expect(page.locator("#in-doubt-rows")).to_contain_text("d-1")
    assert await buttons() == ["Sign out"]
    await page.goto("/suppressions")
    await expect(page.locator("table.rows")).to_contain_text("blocked@example.com")
    assert await buttons() == ["Sign out", "Search"]
    assert await page.get_by_label("Address", exact=True).count() == 0
    confirm = await page.goto("/emails?status=failed&bulk=retry")
    assert confirm.status == 403 and await buttons() == ["Sign out"]

    await page.goto("/emails/f-1")
    token = await csrf_of(page)
    assert token
    from_page = await page.evaluate("""token => fetch('/emails/f-1/retry', {method: 'POST',
        body: new URLSearchParams({csrf_token: token})}).then(async r => [r.status, await r.text()])""", token)
    assert from_page[0] == 403 and "Only operators may do this." in from_page[1]
    origin = {"Origin": console.base}
    for path, form in (("/emails/d-1/resolve", {"as": "sent"}), ("/emails/p-1/cancel", {}),
                       ("/emails/f-1/retry", {}), ("/emails/bulk-retry", {"status": "failed", "expected_count": "1"}),
                       ("/emails/bulk-cancel", {"status": "pending", "expected_count": "1"}),
                       ("/suppressions", {"address": "new@example.com", "reason": "manual"}),
                       ("/suppressions/blocked%40example.com/delete", {})):
        answer = await page.request.post(path, form={"csrf_token": token, **form}, headers=origin, max_redirects=0)
        assert answer.status == 403, path
        assert "Only operators may do this." in await answer.text(), path

    assert {r["dedupe_key"]: r["status"] for r in await store.status(["f-1", "p-1", "d-1"])} == {
        "f-1": "failed", "p-1": "pending", "d-1": "in_doubt"}
    assert [r["address"] for r in await store.fetch("SELECT address FROM email_suppressions")] == [
        "blocked@example.com"]
    assert await store.fetch("SELECT * FROM email_operator_actions") == []
    await page.goto("/emails/f-1")
    await expect(page.locator("#status")).to_have_text("failed")  # and the viewer is still signed in
