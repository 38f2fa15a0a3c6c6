"""How the console stays fast on a table of millions of rows, at a size a test can hold: a filtered page
reads at most SCAN_ROWS rows (lowered here) and "search older" walks on until every match was shown
once; the recipient filter reads its index (schema 18), which leaves the daemon's updates HOT; the
census finds in-doubt rows and is taken at most once per interval, again after an action."""

from __future__ import annotations

import html
import re

import pytest

from outbox_mailer.console.census import Census
from outbox_mailer.store import console as console_store
from outbox_mailer.store.console import ConsoleStore, EmailFilter
from tests.console_harness import Client
from tests.integration.test_console_pages import keys_on, set_status
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio


async def many(store: SqlStore, n: int, **cols: str) -> None:
    """``n`` rows k0000.. created one second apart, oldest first, inserted in one statement."""
    await store.execute(
        "INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, created_at) "
        "SELECT 'k' || lpad(g::text, 4, '0'), ARRAY['Person ' || g || ' <p' || g || '@example.com>'], 's', 'b', "
        "now() - make_interval(secs => $1 - g) FROM generate_series(0, $1 - 1) g", n)


async def test_a_rare_status_is_found_page_by_bounded_page(operator: Client, store: SqlStore,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(console_store, "SCAN_ROWS", 25)
    await many(store, 200)
    failed = [f"k{i:04}" for i in range(200) if i % 37 == 0]  # 6 rows, far apart
    for key in failed:
        await set_status(store, key, "failed")
    seen, url, pages = [], "/emails?status=failed", 0
    while url:
        page = (await operator.get(url)).text
        pages += 1
        seen += keys_on(page)
        found = re.search(r'<a href="([^"]+)" rel="next">([^<]+)</a>', page)
        url = html.unescape(found.group(1)) if found else None
        if found:
            assert found.group(2) == "Search older emails" and "matches among the 25 emails searched" in page
    assert seen == list(reversed(failed)) and pages == 8  # 200 rows, 25 a page
    oldest = keys_on((await operator.get("/emails?status=failed&order=oldest")).text)
    assert oldest == ["k0000"]  # the first 25 rows hold one


async def test_a_page_full_of_matches_continues_from_its_last_row(operator: Client, store: SqlStore,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(console_store, "SCAN_ROWS", 60)
    await many(store, 120)
    first = (await operator.get("/emails?key=k0")).text
    assert keys_on(first) == [f"k{i:04}" for i in range(119, 69, -1)] and "Next page" in first


async def test_the_recipient_filter_reads_its_index_and_the_daemons_updates_stay_hot(store: SqlStore,
                                                                                     db_url: str) -> None:
    await many(store, 2000)
    await store.execute("ANALYZE email_deliveries")
    console = await ConsoleStore.open(db_url)
    try:
        page = await console.emails(EmailFilter(recipient=" P77@Example.COM "), "smtp", after=None, limit=50)
        assert [r["dedupe_key"] for r in page.rows] == ["k0077"] and page.after is None
        assert (await console.emails(EmailFilter(recipient="p77@example"), "smtp", after=None, limit=50)).rows == []
    finally:
        await console.close()
    plan = "\n".join(r["QUERY PLAN"] for r in await store.fetch(
        "EXPLAIN SELECT id FROM email_deliveries d WHERE email_recipient_keys(d.to_addresses, d.cc_addresses, "
        "d.bcc_addresses) @> ARRAY['p77@example.com']"))
    assert "email_deliveries_recipients_idx" in plan, plan
    keys = await store.fetch("SELECT email_recipient_keys(ARRAY['Ann <Ann@Example.com>', 'b@x.example'], "
                             "ARRAY['b@X.example'], '{}') AS k")
    assert set(keys[0]["k"]) == {"ann@example.com", "b@x.example"}


async def test_the_census_finds_in_doubt_rows_and_is_taken_once_per_interval(store: SqlStore, db_url: str) -> None:
    await many(store, 30)
    await set_status(store, "k0003", "in_doubt")
    console = await ConsoleStore.open(db_url)
    now = [0.0]
    try:
        census = Census(console, "smtp", interval=60, clock=lambda: now[0])
        first = await census.read()
        assert first.in_doubt_ids and {(c["status"], c["n"]) for c in first.counts} == {("pending", 29),
                                                                                       ("in_doubt", 1)}
        await set_status(store, "k0004", "in_doubt")
        now[0] = 59
        assert await census.read() is first  # within the interval: the same census
        census.expire()  # an operator acted: a new one, in the background
        assert await census.read() is first
        assert census._running is not None
        await census._running
        second = await census.read()
        assert second is not first and len(second.in_doubt_ids) == 2
        page = await console.emails(EmailFilter(status="in_doubt"), "smtp", after=None, limit=50,
                                    in_doubt_ids=second.in_doubt_ids)
        assert [r["dedupe_key"] for r in page.rows] == ["k0004", "k0003"]
        await set_status(store, "k0004", "sent")  # resolved since: shown as it is now, so not listed
        page = await console.emails(EmailFilter(status="in_doubt"), "smtp", after=None, limit=50,
                                    in_doubt_ids=second.in_doubt_ids)
        assert [r["dedupe_key"] for r in page.rows] == ["k0003"]
    finally:
        await console.close()
