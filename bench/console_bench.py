"""The operator console's server time on a big table: each emails page with one filter, one email, the
overview, p50 and p95 over repeated requests, against the targets.

    .venv/bin/python bench/console_bench.py [--rows 1000000] [--requests 20]

A throwaway cluster, migrated; ROWS emails over 30 days in a realistic mix (93% sent, 3% failed, 1%
cancelled, 0.1% in doubt, 2.5% pending, 0.4% sending; transports smtp 70%, resend 25%, postmark 5%;
delivery events on most sent rows; each recipient in about five rows; an attempt per row that was
tried), written with triggers off and the queue filled as the triggers would, then VACUUM (ANALYZE).
The console app runs in this process and is called through its ASGI interface, signed in as an
operator: server time is the whole request (routing, SQL, template) without the network. Each
filter value is drawn afresh per request (a random existing recipient, key prefix, day...).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import httpx

from outbox_mailer.console.app import build_app
from outbox_mailer.console.auth import hash_password
from outbox_mailer.console.web import Console
from outbox_mailer.devtools.pgcluster import TemporaryPostgres
from outbox_mailer.settings.config import Settings
from outbox_mailer.store.console import ConsoleStore
from outbox_mailer.store.migrations import load_migrations

TARGETS_MS = {"emails": 100.0, "email": 50.0, "overview": 250.0}
DAYS = 30
FILL = """
SET session_replication_role = replica;
INSERT INTO email_deliveries (dedupe_key, status, to_addresses, subject, text_body, html_body, transport, attempts,
                              max_attempts, last_error, provider_message_id, sent_at, claim_token, claimed_at,
                              created_at, updated_at, scheduled_at, delivery_event, delivery_event_at, content_bytes)
SELECT key, status, ARRAY['Customer ' || (g % 200000) || ' <user' || (g % 200000) || '@example' || (g % 50) || '.com>'],
       'Your receipt ' || g, 'Thanks for your order ' || g || repeat(' text', 40),
       '<p>Thanks for your order ' || g || '</p>' || repeat('<p>html</p>', 40), transport,
       CASE WHEN status = 'pending' THEN 0 ELSE 1 END, NULL,
       CASE status WHEN 'failed' THEN '550 5.1.1 no such user' WHEN 'in_doubt' THEN 'timeout after DATA' END,
       CASE WHEN status = 'sent' THEN 'q' || g END,
       CASE WHEN status = 'sent' THEN created + interval '1 s' END,
       CASE WHEN status = 'sending' THEN gen_random_uuid() END,
       CASE WHEN status = 'sending' THEN now() END,
       created, created + interval '1 s', created,
       CASE WHEN status = 'sent' AND g % 10 < 6 THEN 'delivered' WHEN status = 'sent' AND g % 100 = 7 THEN 'bounced'
            WHEN status = 'sent' AND g % 2000 = 9 THEN 'complained' END,
       CASE WHEN status = 'sent' AND (g % 10 < 6 OR g % 100 = 7 OR g % 2000 = 9) THEN created + interval '5 s' END,
       1000
FROM (
    SELECT g, (ARRAY['order-', 'reset-', 'invoice-', 'welcome-'])[1 + g % 4] || g || '-' || (g % 7) AS key,
           now() - make_interval(secs => ({rows} - g)::float8 * {seconds} / {rows}) AS created,
           CASE WHEN g % 1000 < 930 THEN 'sent' WHEN g % 1000 < 960 THEN 'failed' WHEN g % 1000 < 970 THEN 'cancelled'
                WHEN g % 1000 = 970 THEN 'in_doubt' WHEN g % 1000 < 996 THEN 'pending' ELSE 'sending' END AS status,
           CASE WHEN g % 20 < 14 THEN NULL WHEN g % 20 < 19 THEN 'resend' ELSE 'postmark' END AS transport
    FROM generate_series(1, {rows}) g
) s;
INSERT INTO email_queue (delivery_id, priority, scheduled_at, transport, claimed_at)
SELECT id, priority, scheduled_at, transport, claimed_at FROM email_deliveries WHERE status IN ('pending', 'sending');
INSERT INTO email_delivery_attempts (delivery_id, attempt, started_at, finished_at, outcome, reply_code, reply,
                                     transport, worker, provider_message_id)
SELECT id, 1, updated_at - interval '1 s', updated_at,
       CASE status WHEN 'sent' THEN 'sent' WHEN 'failed' THEN 'permanent' WHEN 'in_doubt' THEN 'ambiguous'
                   ELSE 'transient' END,
       CASE status WHEN 'sent' THEN 250 WHEN 'failed' THEN 550 ELSE 451 END, '250 2.0.0 Ok: queued',
       coalesce(transport, 'smtp'), 'bench:1', provider_message_id
FROM email_deliveries WHERE status NOT IN ('pending', 'sending');
INSERT INTO email_delivery_events (delivery_id, provider, provider_event_id, kind, bounce_class, recipient,
                                   occurred_at, received_at, detail)
SELECT id, 'resend', 'ev-' || id, delivery_event, CASE delivery_event WHEN 'bounced' THEN 'hard' END,
       'user@example.com', delivery_event_at, delivery_event_at, '{{}}'
FROM email_deliveries WHERE delivery_event IS NOT NULL;
SET session_replication_role = DEFAULT
"""


def filters(rng: random.Random, rows: int) -> dict[str, callable]:  # type: ignore[valid-type]
    def some() -> int:
        return rng.randrange(1, rows + 1)

    def day() -> str:
        return (datetime.now(UTC) - timedelta(days=rng.randrange(1, DAYS))).date().isoformat()

    return {
        "no filter": lambda: "",
        **{f"status={s}": (lambda s=s: f"status={s}") for s in ("sent", "failed", "cancelled", "in_doubt", "pending",
                                                                  "sending")},
        **{f"transport={t}": (lambda t=t: f"transport={t}") for t in ("smtp", "resend", "postmark")},
        "recipient": lambda: "recipient=" + quote(f"user{some() % 200000}@example{some() % 50}.com"),
        "key prefix": lambda: "key=" + quote(f"order-{some() // 10 * 4}"),
        "created between": lambda: f"created_after={day()}&created_before={day()}T23:59:59",
        **{f"event={e}": (lambda e=e: f"event={e}") for e in ("delivered", "bounced", "complained")},
        "oldest first": lambda: "order=oldest",
    }


async def timed(client: httpx.AsyncClient, url: str) -> float:
    started = time.perf_counter()
    response = await client.get(url)
    elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise RuntimeError(f"{url}: {response.status_code} {response.text[:200]}")
    return elapsed


async def main(args: argparse.Namespace) -> None:
    rng = random.Random(7)
    with TemporaryPostgres() as pg:
        store = await ConsoleStore.open(pg.url, max_size=4)
        await store.migrate(load_migrations())
        started = time.monotonic()
        await store.run_sql(FILL.format(rows=args.rows, seconds=DAYS * 86_400))
        print(f"filled {args.rows:,} rows in {time.monotonic() - started:.0f} s")
        # what schema 18 costs a live table: its index built on these rows (the table's lock held meanwhile)
        await store.run_sql("DROP INDEX email_deliveries_recipients_idx")
        started = time.monotonic()
        await store.run_sql(next(m.sql for m in load_migrations() if m.version == 18).split("$$;", 1)[1])
        print(f"schema 18's recipient index built on {args.rows:,} rows in {time.monotonic() - started:.1f} s")
        await store.run_sql("VACUUM (ANALYZE)")
        await store.add_user("bench", "operator", hash_password("bench password 1"))
        console = Console(Settings(database_url=pg.url, default_from="App <app@example.com>"), store)
        transport = httpx.ASGITransport(app=build_app(console))
        base = "http://console.test"
        async with httpx.AsyncClient(transport=transport, base_url=base, headers={"Origin": base}) as client:
            login = await client.get("/login")
            token = login.text.split('name="csrf_token" value="')[1].split('"')[0]
            assert (await client.post("/login", data={"username": "bench", "password": "bench password 1",
                                                       "csrf_token": token})).status_code == 303
            results: list[tuple[str, str, list[float]]] = []
            for name, make in filters(rng, args.rows).items():
                times = [await timed(client, "/emails?" + make()) for _ in range(args.requests)]
                results.append(("emails", name, times))
            keys = [f"{('order-', 'reset-', 'invoice-', 'welcome-')[g % 4]}{g}-{g % 7}"
                    for g in (rng.randrange(1, args.rows + 1) for _ in range(args.requests))]
            results.append(("email", "by dedupe key", [await timed(client, "/emails/" + quote(k, safe="")) for k in keys]))
            results.append(("overview", "", [await timed(client, "/") for _ in range(args.requests)]))
            results.append(("in-doubt", "", [await timed(client, "/in-doubt") for _ in range(args.requests)]))
            census_ms = []
            for _ in range(3):  # the census itself, in the background of the pages above
                started = time.perf_counter()
                await console.census._take()
                census_ms.append((time.perf_counter() - started) * 1000)
        await store.close()
    print(f"\n{args.rows:,} rows, {args.requests} requests each, server time in ms; the census (whole-table "
          f"counts, the week's attempts and events), at most once a minute while the console is used: "
          f"{statistics.median(census_ms):.0f} ms (median of 3)\n")
    print("| page | filter | p50 | p95 | target (p95) | |\n|---|---|---|---|---|---|")
    for page, name, times in results:
        times.sort()
        p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
        target = TARGETS_MS.get(page)
        verdict = "" if target is None else ("met" if p95 <= target else "**missed**")
        print(f"| {page} | {name} | {statistics.median(times):.1f} | {p95:.1f} | "
              f"{'' if target is None else f'≤ {target:.0f}'} | {verdict} |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--requests", type=int, default=20, help="requests per page and filter")
    asyncio.run(main(ap.parse_args()))
