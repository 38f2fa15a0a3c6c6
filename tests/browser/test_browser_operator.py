"""An operator's work in a real browser (chromium), against the real daemon, PostgreSQL and an SMTP
server: sign in through the form, filter failed rows, open one, read its attempts and events, retry it
and watch its status turn to sent in place (refresh.js); bulk-retry a filtered selection of 50 after
confirming the count, and exactly those 50 are sent, once each; resolve an in-doubt row; add and
remove a suppression; sign out."""

from __future__ import annotations

import json
from typing import Any

import pytest
from playwright.async_api import expect

from tests.browser.browser_harness import sign_in
from tests.integration.conftest import insert
from tests.smtp_server import SmtpTestServer
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio


async def listed_keys(page: Any) -> list[str]:
    """The dedupe keys of the email list on the page, in order."""
    return [k.strip() for k in await page.locator("table.rows tbody td:first-child a").all_text_contents()]


async def statuses(store: SqlStore, *keys: str) -> dict[str, str]:
    return {r["dedupe_key"]: r["status"] for r in await store.status(list(keys))}


async def filter_emails(page: Any, **fields: str) -> None:
    """Fill the email list's filter form (labels as shown) and submit it."""
    await page.get_by_role("link", name="Emails", exact=True).click()
    for label, value in fields.items():
        field = page.get_by_label(label, exact=True)
        if await field.evaluate("el => el.tagName") == "SELECT":
            await field.select_option(value)
        else:
            await field.fill(value)
    await page.get_by_role("button", name="Filter").click()
    await page.wait_for_url("**/emails?*")


async def test_operator_filters_failed_rows_opens_one_retries_it_and_sees_it_sent(
        page: Any, store: SqlStore, smtp_server: SmtpTestServer, running: Any) -> None:
    for i in range(3):
        await insert(store, f"receipt-{i}", subject=f"receipt-{i}", metadata={"order": 1040 + i, "shop": "eu"})
    for i in range(2):  # failed too, on another transport: the filter leaves them out
        await insert(store, f"api-{i}", subject=f"api-{i}", transport="api")
    await store.execute("UPDATE email_deliveries SET status = 'failed' WHERE dedupe_key LIKE 'api-%'")
    smtp_server.fail("DATA", "554 5.6.0 content rejected")  # for good: no retry by the daemon
    daemon = await running()
    rows = await daemon.final("receipt-0", "receipt-1", "receipt-2")
    assert {r["status"] for r in rows.values()} == {"failed"}
    smtp_server.clear_faults()  # the server changed its mind: a retry will be accepted
    await store.execute(
        "INSERT INTO email_delivery_events (delivery_id, provider, provider_event_id, kind, bounce_class, recipient, "
        "occurred_at, detail) VALUES ($1, 'resend', 'ev-1', 'bounced', 'soft', 'to@example.com', now(), $2::jsonb)",
        rows["receipt-1"]["id"], json.dumps({"reason": "mailbox full"}))

    await sign_in(page, "olga")
    await filter_emails(page, Status="failed", Transport="smtp")
    assert sorted(await listed_keys(page)) == ["receipt-0", "receipt-1", "receipt-2"]
    await filter_emails(page, Status="failed", Transport="api")
    assert sorted(await listed_keys(page)) == ["api-0", "api-1"]
    await filter_emails(page, Status="failed", Transport="smtp")

    await page.get_by_role("link", name="receipt-1", exact=True).click()
    await expect(page.locator("h1")).to_have_text("Email receipt-1")
    assert (await page.locator("h1 .key").bounding_box())["width"] > 50  # the key reads across, not down
    metadata = page.locator("table.fields tr", has=page.locator("th", has_text="metadata"))
    await expect(metadata.locator("td")).to_have_text('{"order": 1041, "shop": "eu"}')  # keys and values
    await expect(page.locator("#status")).to_have_text("failed")
    attempts = page.locator("#attempts-section")
    await expect(attempts).to_contain_text("#1 permanent")
    await expect(attempts).to_contain_text("554 5.6.0 content rejected")
    await expect(page.locator("#events-section")).to_contain_text("bounced (soft) from resend for to@example.com")

    await page.get_by_role("button", name="Retry receipt-1").click()
    await page.wait_for_url("**/emails/receipt-1?done=retry")
    await expect(page.get_by_role("status")).to_have_text("Requeued: it is pending again.")
    loads: list[str] = []
    page.on("load", lambda _: loads.append(page.url))
    # no reload by the test: refresh.js swaps the status in place every 2 s while pending or sending
    await expect(page.locator("#status")).to_have_text("sent", timeout=15_000)
    await expect(attempts).to_contain_text("#2 sent")
    assert loads == []  # the page was not loaded again: the notice above is still the one shown
    await expect(page.get_by_role("status")).to_have_text("Requeued: it is pending again.")

    assert await statuses(store, "receipt-0", "receipt-1", "receipt-2", "api-0", "api-1") == {
        "receipt-0": "failed", "receipt-1": "sent", "receipt-2": "failed", "api-0": "failed", "api-1": "failed"}
    assert smtp_server.received_by_header("Subject", accepted_only=True) == {"receipt-1": 1}
    actions = await store.fetch("SELECT actor, action, dedupe_key FROM email_operator_actions")
    assert actions == [{"actor": "olga", "action": "retry", "dedupe_key": "receipt-1"}]


async def test_bulk_retry_confirms_the_count_and_sends_exactly_the_50_rows_once(
        page: Any, store: SqlStore, smtp_server: SmtpTestServer, running: Any) -> None:
    chosen = [f"newsletter-{i:02}" for i in range(50)]
    others = {  # each differs from the filter by one field
        **{f"newsletter-api-{i}": "api" for i in range(5)},  # transport
        **{f"receipt-{i}": None for i in range(5)},  # key prefix
    }
    cancelled = [f"newsletter-c-{i}" for i in range(3)]  # status: cancelled, not failed
    for key in chosen + cancelled:
        await insert(store, key, subject=key)
    for key, transport in others.items():
        await insert(store, key, subject=key, transport=transport)
    await store.execute("UPDATE email_deliveries SET status = 'failed', attempts = 1, last_error = '550 no such user'"
                        " WHERE dedupe_key NOT LIKE 'newsletter-c-%'")
    await store.execute("UPDATE email_deliveries SET status = 'cancelled' WHERE dedupe_key LIKE 'newsletter-c-%'")
    daemon = await running()

    await sign_in(page, "olga")
    await filter_emails(page, Status="failed", Transport="smtp", **{"Dedupe key starts with": "newsletter-"})
    assert sorted(await listed_keys(page)) == chosen
    await page.get_by_role("link", name="retry the failed, cancelled and in-doubt ones").click()
    await expect(page.locator("h1")).to_have_text("Retry 50 emails?")
    assert await page.locator("#main li").all_text_contents() == [
        "status: failed", "transport: smtp", "key: newsletter-"]
    await page.get_by_role("button", name="Retry these 50 emails").click()
    await expect(page.locator("h1")).to_have_text("Requeued 50 emails")
    assert sorted(await page.locator("ul.keys a").all_text_contents()) == chosen

    rows = await daemon.final(*chosen, timeout=30)
    assert {r["status"] for r in rows.values()} == {"sent"}
    assert smtp_server.wait_until(lambda: len(smtp_server.accepted) >= 50, timeout=5)
    assert smtp_server.received_by_header("Subject") == {key: 1 for key in chosen}  # each once, none other
    assert set((await statuses(store, *others)).values()) == {"failed"}
    assert set((await statuses(store, *cancelled)).values()) == {"cancelled"}
    actions = await store.fetch("SELECT actor, action, dedupe_key, detail FROM email_operator_actions")
    assert sorted(a["dedupe_key"] for a in actions) == chosen
    assert {(a["actor"], a["action"]) for a in actions} == {("olga", "retry")}
    assert {a["detail"]["count"] for a in actions} == {50}


async def test_operator_resolves_an_in_doubt_row_manages_suppressions_and_signs_out(
        page: Any, store: SqlStore) -> None:
    await insert(store, "doubt-1", subject="doubt-1")
    await insert(store, "doubt-2", subject="doubt-2")
    await store.execute("UPDATE email_deliveries SET status = 'in_doubt', attempts = 1, "
                        "last_error = 'connection lost after DATA' WHERE dedupe_key LIKE 'doubt-%'")
    await sign_in(page, "olga")

    await page.get_by_role("link", name="In doubt", exact=True).click()
    table = page.locator("#in-doubt-rows")
    await expect(table).to_contain_text("connection lost after DATA")
    await page.get_by_role("button", name="Resolve as sent doubt-1").click()
    await page.wait_for_url("**/in-doubt")
    await expect(table).not_to_contain_text("doubt-1")
    await expect(table).to_contain_text("doubt-2")
    assert await statuses(store, "doubt-1", "doubt-2") == {"doubt-1": "sent", "doubt-2": "in_doubt"}

    await page.get_by_role("link", name="Suppressions", exact=True).click()
    await page.get_by_label("Address", exact=True).fill("Someone@Example.com")
    await page.get_by_label("Reason").select_option("complaint")
    await page.get_by_label("Expires after (days, empty: never)").fill("30")
    await page.get_by_role("button", name="Suppress").click()
    await page.wait_for_url("**/suppressions")
    row = page.locator("table.rows tbody tr", has_text="complaint")
    await expect(row).to_contain_text("someone@example.com")
    suppressed = await store.fetch("SELECT address, reason, expires_at > now() + interval '29 days' AS later "
                                   "FROM email_suppressions")
    assert suppressed == [{"address": "someone@example.com", "reason": "complaint", "later": True}]
    await row.get_by_role("button", name="Remove every suppression of someone@example.com").click()
    await page.wait_for_url("**/suppressions")
    await expect(page.locator("table.rows tbody")).to_have_text("No suppression.")
    assert await store.fetch("SELECT address FROM email_suppressions") == []

    done = await store.fetch("SELECT action, dedupe_key, address FROM email_operator_actions ORDER BY id")
    assert [(a["action"], a["dedupe_key"] or a["address"]) for a in done] == [
        ("resolve", "doubt-1"), ("suppress", "someone@example.com"), ("unsuppress", "someone@example.com")]

    await page.get_by_role("button", name="Sign out").click()
    await page.wait_for_url("**/login")
    await page.goto("/emails/doubt-2")
    assert page.url.endswith("/login")
    await expect(page.locator("h1")).to_have_text("Sign in")
