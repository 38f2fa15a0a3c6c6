"""Every page of the console with the keyboard alone and through axe-core, in a real browser (chromium),
on a console whose rows the real daemon sent or failed through an SMTP server: signing in, filtering,
a bulk retry's confirmation, an email's retry, an in-doubt row's resolution and the suppressions are
done with Tab, typing and Enter; Tab reaches every control of every page, each with a visible focus;
axe-core finds nothing serious or critical. Each page's screenshot goes to tests/browser/screenshots/
(the README's and docs/console.md's images are copies of two of them)."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from playwright.async_api import TimeoutError as PlaywrightTimeout
from playwright.async_api import expect

from tests.browser.browser_harness import (
    axe_violations,
    focused,
    interactive_count,
    screenshot,
    tab_stops,
    tab_to,
)
from tests.console_harness import PASSWORD
from tests.in_process_daemon import Running
from tests.integration.conftest import insert
from tests.smtp_server import SmtpTestServer
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio

HTML = ("<div style=\"font-family: sans-serif\"><h1>Thanks for your order</h1><p>Hello {name}, your order "
        "<strong>#{n}</strong> is on its way.</p><p><a href=\"https://shop.example/orders/{n}\">Track it</a></p></div>")


async def populate(store: SqlStore, smtp_server: SmtpTestServer, running: Any) -> Running:
    """A console worth looking at: emails the daemon sent (one after a retry), failed and left pending,
    one in doubt, a failed one on another transport, delivery events and suppressions."""
    names = ["Ada", "Grace", "Linus", "Margaret", "Ken", "Barbara", "Dennis", "Frances", "Edsger", "Radia"]
    keys = []
    for i, name in enumerate(names):
        key = f"order-{1040 + i}"
        to = "nobody@example.com" if i in (2, 7) else f"{name.lower()}@example.com"
        await insert(store, key, subject=f"Your order #{1040 + i} is on its way", to_addresses=[f"{name} <{to}>"],
                     text_body=f"Hello {name}, your order #{1040 + i} is on its way.",
                     html_body=HTML.format(name=name, n=1040 + i), metadata={"order": 1040 + i})
        keys.append(key)
    await insert(store, "password-reset-77", subject="Reset your password", to_addresses=["Ken <ken@example.com>"],
                 scheduled_at=datetime(2100, 1, 1, tzinfo=UTC))  # pending, not due
    await insert(store, "invoice-2026-0042", subject="Invoice 2026-0042", transport="api")  # no such transport
    await insert(store, "welcome-ada", subject="Welcome!", to_addresses=["Ada <ada@example.com>"])
    await store.execute("UPDATE email_deliveries SET status = 'in_doubt', attempts = 1, "
                        "last_error = 'connection lost after the message was sent, before the reply' "
                        "WHERE dedupe_key = 'welcome-ada'")
    smtp_server.fail("RCPT", "550 5.1.1 <nobody@example.com>: no such user", address="nobody@example.com")
    smtp_server.fail("RCPT", "451 4.7.1 greylisted, try again later", address="grace@example.com", times=1)
    daemon = await running()
    rows = await daemon.final(*keys, "invoice-2026-0042")
    assert [r["status"] for r in rows.values()].count("failed") == 3
    for key, kind, bounce in (("order-1041", "delivered", None), ("order-1040", "delivered", None),
                              ("order-1042", "bounced", "hard")):
        await store.execute(
            "INSERT INTO email_delivery_events (delivery_id, provider, provider_event_id, kind, bounce_class, "
            "recipient, occurred_at, detail) SELECT id, 'resend', $2, $3, $4, to_addresses[1], now(), $5::jsonb "
            "FROM email_deliveries WHERE dedupe_key = $1", key, f"ev-{key}", kind, bounce,
            json.dumps({"type": f"email.{kind}"}))
    await store.execute("UPDATE email_deliveries d SET delivery_event = e.kind, delivery_event_at = e.occurred_at "
                        "FROM email_delivery_events e WHERE e.delivery_id = d.id")
    await store.execute("INSERT INTO email_suppressions (address, reason, source, expires_at) VALUES "
                        "('complainer@example.org', 'complaint', 'resend', NULL), "
                        "('old-list@example.net', 'manual', 'operator', now() + interval '30 days')")
    await store.execute("INSERT INTO email_templates (name, locale, version, subject, text_body, html_body, "
                        "created_by) VALUES ('shipped', 'en', 1, 'Order {{ order }} shipped', "
                        "'Hello {{ name }}, order {{ order }} is on its way.', "
                        "'<p>Hello {{ name }}, order {{ order }} is on its way.</p>'"
                        "'<p><a href=\"https://shop.example/orders/{{ order }}\">Track it</a></p>', 'cli:ann')")
    await store.execute("INSERT INTO email_deliveries (dedupe_key, to_addresses, template, template_data, "
                        "scheduled_at) VALUES ('shipped-1050', ARRAY['Ada <ada@example.com>'], 'shipped', "
                        "'{\"name\": \"Ada\", \"order\": 1050}', '2100-01-01')")  # pending, not due
    return daemon


async def mailbox_is_back(store: SqlStore, smtp_server: SmtpTestServer) -> None:
    """nobody@example.com exists now: no refusal, and the suppression its 550 made is lifted."""
    smtp_server.clear_faults()
    await store.execute("DELETE FROM email_suppressions WHERE address = 'nobody@example.com'")


async def keyboard_sign_in(page: Any, user: str = "olga") -> None:
    """Type into the login page's fields (the first has the focus), Tab between them, press Enter."""
    await page.goto("/login")
    # autofocus is applied once the page has loaded, which may come after goto returns: wait for the focus
    # to land somewhere (bounded by playwright's timeout), then check where
    await page.wait_for_function("document.activeElement !== null && document.activeElement !== document.body")
    assert (await focused(page))["text"] == "username"  # autofocus
    await page.keyboard.press("Shift+Tab")
    assert (await focused(page))["text"] == "Skip to content"
    await page.keyboard.press("Tab")
    await page.keyboard.type(user)
    await page.keyboard.press("Tab")
    assert (await focused(page))["tag"] == "INPUT"
    await page.keyboard.type(PASSWORD)
    await page.keyboard.press("Enter")
    await page.wait_for_url("**/")


async def press(page: Any, selector: str, key: str = "Enter") -> None:
    """Tab to ``selector`` and press ``key`` on it."""
    await tab_to(page, selector)
    await page.keyboard.press(key)


async def test_keyboard_alone_signs_in_filters_bulk_retries_and_signs_out(
        page: Any, store: SqlStore, smtp_server: SmtpTestServer, running: Any) -> None:
    daemon = await populate(store, smtp_server, running)
    await mailbox_is_back(store, smtp_server)
    sent_before = len(smtp_server.accepted)
    await keyboard_sign_in(page)
    await press(page, 'nav a[href="/emails"]')
    await page.wait_for_url("**/emails")

    await page.keyboard.press("Tab")  # from the skip link's target, main: the first filter
    await tab_to(page, "#f-status")
    await page.keyboard.type("failed")  # a closed select takes the typed option
    assert await page.locator("#f-status").input_value() == "failed"
    await page.keyboard.press("Tab")
    await page.keyboard.type("smtp")
    await page.keyboard.press("Enter")  # submits the filter form
    await page.wait_for_url("**/emails?*status=failed*")
    await expect(page.locator("table.rows tbody tr")).to_have_count(2)

    await press(page, 'a[href*="bulk=retry"]')
    await expect(page.locator("h1")).to_have_text("Retry 2 emails?")
    await press(page, 'form[action="/emails/bulk-retry"] button')
    await expect(page.locator("h1")).to_have_text("Requeued 2 emails")
    rows = await daemon.final("order-1042", "order-1047")
    assert {r["status"] for r in rows.values()} == {"sent"}
    assert smtp_server.wait_until(lambda: len(smtp_server.accepted) == sent_before + 2, timeout=5)

    await press(page, 'nav button[type="submit"]')  # Sign out
    await page.wait_for_url("**/login")
    await page.goto("/")
    assert page.url.endswith("/login")


async def test_keyboard_alone_retries_an_email_resolves_in_doubt_and_manages_suppressions(
        page: Any, store: SqlStore, smtp_server: SmtpTestServer, running: Any) -> None:
    daemon = await populate(store, smtp_server, running)
    await mailbox_is_back(store, smtp_server)
    await keyboard_sign_in(page)

    await press(page, '#overview a[href="/in-doubt"]')  # the overview's in-doubt count
    await page.wait_for_url("**/in-doubt")
    await press(page, 'form[action="/emails/welcome-ada/resolve"] button')  # the first: resolve as sent
    await page.wait_for_url("**/in-doubt")
    await expect(page.locator("#in-doubt-rows tbody")).to_have_text("No email is in doubt.")
    assert (await store.status(["welcome-ada"]))[0]["status"] == "sent"

    await page.goto("/emails?status=failed")
    await press(page, 'a[href="/emails/order-1047"]')
    await page.wait_for_url("**/emails/order-1047")
    await press(page, "#state button", "Space")
    await page.wait_for_url("**/emails/order-1047?done=retry")
    assert (await daemon.final("order-1047"))["order-1047"]["status"] == "sent"

    await page.goto("/suppressions")
    await tab_to(page, "#s-address")
    await page.keyboard.type("Ken@Example.com")
    await page.keyboard.press("Tab")
    await page.keyboard.type("unsubscribe")
    await page.keyboard.press("Tab")
    await page.keyboard.type("7")
    await page.keyboard.press("Enter")
    await page.wait_for_url("**/suppressions")
    await expect(page.locator("table.rows")).to_contain_text("ken@example.com")
    await press(page, 'form[action="/suppressions/ken%40example.com/delete"] button')
    await page.wait_for_url("**/suppressions")
    await expect(page.locator("table.rows")).not_to_contain_text("ken@example.com")
    done = await store.fetch("SELECT action, dedupe_key, address, detail FROM email_operator_actions ORDER BY id")
    assert [(a["action"], a["dedupe_key"] or a["address"]) for a in done] == [
        ("resolve", "welcome-ada"), ("retry", "order-1047"), ("suppress", "ken@example.com"),
        ("unsuppress", "ken@example.com")]
    assert done[2]["detail"]["reason"] == "unsubscribe"  # a JSON object, not a string of one


PAGES = (  # name, URL (after signing in; login: before)
    ("login", "/login"),
    ("overview", "/"),
    ("emails", "/emails"),
    ("email", "/emails/order-1041"),
    ("email-failed", "/emails/order-1042"),
    ("email-pending", "/emails/password-reset-77"),
    ("in-doubt", "/in-doubt"),
    ("suppressions", "/suppressions"),
    ("bulk-confirmation", "/emails?status=failed&bulk=retry"),
    ("refused", "/emails?status=bogus"),
    ("templates", "/templates"),
    ("template", "/templates/shipped?data=%7B%22name%22%3A%20%22Ada%22%2C%20%22order%22%3A%201050%7D"),
    ("email-template", "/emails/shipped-1050"),
)


async def test_every_page_passes_axe_and_tab_reaches_every_control_with_a_visible_focus(
        new_context: Any, store: SqlStore, smtp_server: SmtpTestServer, running: Any, axe_source: str) -> None:
    await populate(store, smtp_server, running)
    # axe-core is injected as an inline script, which the console's CSP refuses: off for this context only
    page = await (await new_context(bypass_csp=True)).new_page()
    problems: dict[str, list[str]] = {}
    for name, url in PAGES:
        if name == "overview":
            await keyboard_sign_in(page)
        await page.goto(url)
        for frame in page.frames:  # the email's sandboxed HTML: a Tab stop once its document is there
            await frame.wait_for_load_state("load")
        await screenshot(page, name)
        found = await axe_violations(page, axe_source)
        title = await page.title()
        if "<" in title or not title.endswith(" · outbox-mailer"):
            found.append(f"title {title!r}")
        stops = await tab_stops(page)
        found += [f"no visible focus on {s['tag']} {s['text']!r}" for s in stops
                  if s["tag"] != "IFRAME" and not (s["outline"] and s["visible"])]  # a frame: its content's
        controls = await interactive_count(page)
        if len(stops) < controls:
            found.append(f"Tab reaches {len(stops)} of {controls} controls")
        if found:
            problems[name] = found
    assert problems == {}


async def test_the_live_refresh_keeps_the_keyboard_focus_where_it_is(page: Any, store: SqlStore) -> None:
    await insert(store, "later", scheduled_at=datetime(2100, 1, 1, tzinfo=UTC))  # pending: refreshed every 2 s
    await keyboard_sign_in(page)
    await page.goto("/emails/later")
    await tab_to(page, "#state button")  # Cancel, inside the live #state
    await page.evaluate("() => { document.getElementById('state').dataset.seen = '1'; }")
    with contextlib.suppress(PlaywrightTimeout):  # a refresh swaps #state within 2 s and a fetch (or pauses)
        await page.wait_for_function("() => !document.getElementById('state').dataset.seen", timeout=6_000)
    here = await focused(page)
    assert here is not None and here["text"] == "Cancel\nlater", here
