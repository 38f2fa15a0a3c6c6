"""Daemons under shared limits, against real servers: a daily limit two daemons share, and
adaptive throttling by a provider's 429s and by SMTP's 454 4.7.0 (quotas.py)."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from prometheus_client import generate_latest

from outbox_mailer.daemon.metrics import Metrics
from outbox_mailer.daemon.quotas import transport_use
from outbox_mailer.store import Store
from outbox_mailer.store.limits import LimitStore
from tests.integration.conftest import insert
from tests.integration.test_http_transports import resend_settings, rows_with
from tests.provider_server import ProviderServer
from tests.smtp_server import SmtpTestServer

pytestmark = pytest.mark.anyio


async def test_a_daily_limit_of_50_shared_by_two_daemons_sends_50_of_80_and_the_rest_when_the_window_allows(
        api: Any, daemon: Any, provider_server: ProviderServer) -> None:
    window = 6.0
    limited = resend_settings(provider_server, daily_limit=50, daily_window_seconds=window)
    runs = [await daemon({"resend": api()}, {"resend": limited}, default_transport="resend") for _ in range(2)]
    keys = [f"day-{i}" for i in range(80)]
    started = time.monotonic()
    await rows_with(runs[0], keys)
    first = await runs[0].wait_for(lambda rows: sum(r["status"] == "sent" for r in rows.values()) >= 50, keys)
    await anyio.sleep(max(0.0, started + window * 0.6 - time.monotonic()))
    rows = {r["dedupe_key"]: r for r in await runs[0].store.status(keys)}
    assert time.monotonic() - started < window, "still inside the first window"
    pending = [r for r in rows.values() if r["status"] == "pending"]
    assert sum(r["status"] == "sent" for r in rows.values()) == 50 and len(pending) == 30, first
    assert all(r["attempts"] == 0 for r in pending), "waiting for the window charges no attempt"
    assert not any(r["status"] == "failed" for r in rows.values())
    assert sum(provider_server.accepted.values()) == 50
    [stopped, *_] = [r.daemon for r in runs if r.daemon.gates["resend"].is_paused(anyio.current_time())]
    metrics = Metrics(stopped.settings)
    metrics.take_snapshot(stopped)
    page = generate_latest(metrics.registry).decode()
    assert 'outbox_mailer_transport_daily_remaining{transport="resend"} 0.0' in page
    assert 'outbox_mailer_transport_daily_used{transport="resend"} 50.0' in page
    assert 'outbox_mailer_transport_paused{transport="resend"} 1.0' in page, "paused until the window has room"
    use = await transport_use({"resend": stopped.settings.transports["resend"]},
                              LimitStore(store=runs[0].store))
    assert use["resend"]["requests_granted"] >= 50, "request slots (some granted to sends the window then stopped)"
    assert use["resend"] | {"rate_per_second": None, "requests_granted": 0} == {
        "rate_per_second": None, "configured_rate_per_second": 1000.0, "throttles": 0, "requests_granted": 0,
        "window_seconds": window, "daily_limit": 50, "daily_used": 50, "daily_remaining": 0}, "what stats shows"

    done = await runs[0].wait_for(lambda rows: all(r["status"] == "sent" for r in rows.values()), keys,
                                  timeout=window * 3)
    assert sum(provider_server.accepted.values()) == 80 and all(n == 1 for n in provider_server.accepted.values())
    sent_at = sorted(r["sent_at"].timestamp() for r in done.values())
    busiest = max(sum(1 for t in sent_at if s <= t < s + window - 0.5) for s in sent_at)
    assert busiest <= 50, f"{busiest} sent within one window"
    assert sent_at[-1] - sent_at[0] >= window - 0.5, "the last 30 waited for the window"
    assert sum(g.limit.grants for r in runs for g in r.daemon.gates.values() if g.limit) < 200


@pytest.mark.alone  # a rate or timing bound: no other test meanwhile (tests/conftest.py)
async def test_a_providers_429s_lower_the_shared_rate_and_stop_within_seconds(
        api: Any, daemon: Any) -> None:
    server = ProviderServer(rate_per_second=20.0, burst=2).start()  # every third request of 30/s refused
    try:
        run = await daemon({"resend": api(base_url=server.base_url)},
                           {"resend": resend_settings(server, rate_per_second=30.0, burst=1, max_parallel=4)},
                           default_transport="resend", concurrency=16)
        limit = run.daemon.gates["resend"].limit
        keys = [f"thr-{i}" for i in range(400)]
        await rows_with(run, keys)
        with anyio.fail_after(10):
            while not server.rate_limit.refused:
                await anyio.sleep(0.02)
        await anyio.sleep(3.0)  # the replies to requests already under way come back
        assert limit.rate_in_force <= 15.0 + 0.5, limit.rate_in_force
        refused, accepted, since = server.rate_limit.refused, len(server.accepted_times), time.monotonic()
        await anyio.sleep(5.0)
        print(f"throttling: {refused} refused at 30/s; then {len(server.accepted_times) - accepted} accepted in 5 s "
              f"at {limit.rate_in_force:.1f}/s")
        assert server.rate_limit.refused == refused, "no 429 once the rate was lowered"
        assert server.accepted_between(since, since + 5.0) >= 5.0 * 12, "it still sends, near the lowered rate"
        assert limit.throttles >= 1
    finally:
        server.stop()


async def test_smtp_454_throttling_after_data_is_retried_not_in_doubt_and_lowers_the_rate(
        running: Any, smtp_server: SmtpTestServer) -> None:
    smtp_server.fail("DATA", "454 4.7.0 Throttling failure: Maximum sending rate exceeded.", times=1)
    smtp = {"host": smtp_server.host, "port": smtp_server.port, "tls": "none", "connect_timeout_seconds": 2,
            "command_timeout_seconds": 2, "data_timeout_seconds": 2, "rate_per_second": 10.0}
    run = await running(smtp=smtp)
    await insert(run.store, "ses-454")
    [row] = (await run.final("ses-454")).values()
    assert row["status"] == "sent" and row["attempts"] == 2
    attempts = await run.store.attempts(row["id"])
    outcomes = [(a["outcome"], a["error"]) for a in attempts]
    assert outcomes[0][0] == "transient" and outcomes[-1][0] == "sent", outcomes
    assert "ambiguous" not in [o for o, _ in outcomes], "a reply came: the server did not take it"
    assert "454 4.7.0 Throttling failure" in attempts[0]["error"]
    limit = run.daemon.gates["smtp"].limit
    assert limit.rate_in_force == pytest.approx(5.0, abs=0.1) and limit.throttles == 1


async def test_a_batch_with_more_recipients_than_the_daily_limit_goes_member_by_member(
        api: Any, daemon: Any, store: Store, provider_server: ProviderServer) -> None:
    keys = [f"pair-{i}" for i in range(4)]
    for key in keys:  # all four queued before the daemon starts: its first claim takes them together
        await insert(store, key, transport="resend", to_addresses=[f"{key}-a@example.com", f"{key}-b@example.com"])
    limited = resend_settings(provider_server, batch=True, daily_limit=5)
    run = await daemon({"resend": api(batch=True)}, {"resend": limited}, default_transport="resend",
                       concurrency=50)
    # settled: two sent (4 recipients), the other two back to pending with the reason (nothing else can
    # happen to them before the window, a day, has room)
    await run.wait_for(lambda rows: sorted(r["status"] for r in rows.values()) == ["pending", "pending", "sent", "sent"]
                       and all(r["last_error"] for r in rows.values() if r["status"] == "pending"), keys)
    assert not provider_server.sends("/emails/batch"), "8 recipients never fit one request under a limit of 5"
