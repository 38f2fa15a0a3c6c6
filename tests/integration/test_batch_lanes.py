"""A batching lane under its provider's rate, with rows trickling in.

A Resend lane whose start window (rescue delay - send timeout - margin: how long after its claim
a send may start) is one second, at 2 requests/s and at one request every 2 s: rows that arrive a
few at a time must all go out, each in one attempt. Waiting for a request slot is not an attempt:
nothing is charged or written for it, and the lane is claimed only what its rate starts in time.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from outbox_mailer.clock import monotonic
from outbox_mailer.daemon.service import Daemon
from outbox_mailer.settings.transports import ApiTransportSettings
from outbox_mailer.store import ClaimSession
from outbox_mailer.transports.api.http import HttpApiTransport
from tests.in_process_daemon import settings_for
from tests.integration.test_daemon_batches import insert, settled
from tests.integration.test_http_transports import resend_settings, rows_with
from tests.provider_server import KEY_HEADER, ProviderServer
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio
UNUSED_SMTP = {"host": "127.0.0.1", "port": 25, "tls": "none", "data_timeout_seconds": 2, "send_timeout_seconds": 2}


def given_back(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The claims the daemon gave back untried (too old to start a send), from its log."""
    return [m for m in caplog.messages if m.startswith("given back")]


@pytest.mark.parametrize(("rate", "ticks", "rows_per_tick", "every"), [
    (2.0, 30, 5, 0.2),  # 150 rows at 25/s, Resend's default rate
    (0.5, 6, 2, 0.5),  # a request every 2 s (as after throttling): longer than the start window
], ids=["two_requests_a_second", "rate_slower_than_the_start_window"])
async def test_rows_trickling_into_a_rate_limited_batch_lane_are_each_sent_in_one_attempt(
        store: SqlStore, resend: Any, caplog: pytest.LogCaptureFixture,
        rate: float, ticks: int, rows_per_tick: int, every: float) -> None:
    caplog.set_level(logging.DEBUG, logger="outbox_mailer")
    server = ProviderServer().start()
    try:
        # send timeout 2 s, rescue delay 4 s: a send may start up to 1 s after its claim
        await resend(server, rate=rate, rescue_after_seconds=4, rescue_interval_seconds=0.5)
        keys: list[str] = []
        for tick in range(ticks):  # rows arrive while the daemon sends
            keys += await insert(store, rows_per_tick, prefix=f"t{tick}-")
            await anyio.sleep(every)
        assert set((await settled(store, len(keys), timeout=90)).values()) == {"sent"}
        assert dict(server.accepted_by_header) == dict.fromkeys(keys, 1), "each email accepted once"
        attempts = await store.fetch(
            "SELECT d.attempts, count(a.*) AS recorded, "
            "       count(a.*) FILTER (WHERE a.outcome <> 'sent') AS not_sent "
            "FROM email_deliveries d LEFT JOIN email_delivery_attempts a ON a.delivery_id = d.id GROUP BY d.id")
        assert {(r["attempts"], r["recorded"], r["not_sent"]) for r in attempts} == {(1, 1, 0)}, \
            "each row: one attempt, charged once, and it was the send (waiting for a slot is no attempt)"
        assert not given_back(caplog), "the lane was claimed no more rows than its rate starts in time"
    finally:
        server.stop()


async def test_a_member_too_old_to_start_is_left_out_of_its_batch_untried_and_the_others_go(
        db_url: str, store: SqlStore) -> None:
    server = ProviderServer().start()
    options = {"kind": "resend", "api_key": "test", "base_url": server.base_url, "timeout_seconds": 2}
    transport = HttpApiTransport(ApiTransportSettings(**options), name="resend")
    settings = settings_for(db_url, SimpleNamespace(host="", port=0), smtp=UNUSED_SMTP,
                            transports={"resend": options}, default_transport="resend", concurrency=10,
                            rescue_after_seconds=4)
    daemon = Daemon(settings, {"resend": transport}, default_transport="resend")  # its parts, not its loops
    claims = await ClaimSession.open(db_url)
    try:
        keys = await insert(store, 3, prefix="m")
        rows = await claims.claim_due(3, daemon.worker, default_transport="resend")
        old, *young = sorted(rows, key=lambda d: d.dedupe_key)
        daemon.inflight.hold([old], monotonic() - 60)  # claimed long before its batch could start
        daemon.inflight.hold(young, monotonic())
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.recorder.run)
            await daemon.executor.carry_batch(rows, "resend")
            await daemon.recorder.inbox.aclose()  # the recorder writes the three outcomes, then ends
        [request] = server.sends()
        assert request.path == "/emails/batch"
        assert [m["headers"][KEY_HEADER] for m in request.json()] == [d.dedupe_key for d in young], \
            "the young members went in the request, the old one did not"
        states = {r["dedupe_key"]: r for r in await store.fetch(
            "SELECT dedupe_key, status, attempts, last_error, scheduled_at, "
            "(SELECT count(*) FROM email_delivery_attempts a WHERE a.delivery_id = d.id) AS recorded "
            "FROM email_deliveries d")}
        assert {k: (states[k]["status"], states[k]["attempts"], states[k]["recorded"]) for k in keys} == {
            old.dedupe_key: ("pending", 0, 0), **{d.dedupe_key: ("sent", 1, 1) for d in young}}, \
            "the old member is back untried: not charged, no attempt written"
        assert states[old.dedupe_key]["last_error"] is None
        assert states[old.dedupe_key]["scheduled_at"] == old.scheduled_at, "due as it was: no backoff"
    finally:
        await claims.close()
        await daemon._db.close()  # the daemon's run would close them
        await daemon._limits.close()
        await transport.aclose()
        server.stop()


@pytest.mark.alone  # a 1 s start window against a 2 s rate: a claim delayed by another test's load misses its slot
async def test_rows_of_a_lane_waiting_for_its_rate_are_not_claimed_while_another_transport_has_room(
        api: Any, daemon: Any, provider_server: ProviderServer,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="outbox_mailer")
    slow = resend_settings(provider_server, rate_per_second=0.5, burst=1, batch=True)  # a request every 2 s
    transports = {"slow": api(name="slow", batch=True, timeout_seconds=2), "fast": api(name="fast", timeout_seconds=2)}
    run = await daemon(transports, {"slow": slow, "fast": resend_settings(provider_server)}, default_transport="fast",
                       smtp=UNUSED_SMTP, rescue_after_seconds=4)  # a start window of 1 s
    keys: list[str] = []
    for tick in range(6):  # rows for both transports arrive while the daemon sends
        for transport in ("slow", "fast"):
            batch = [f"{transport}{tick}-{i}" for i in range(2)]
            await rows_with(run, batch, transport=transport)
            keys += batch
        await anyio.sleep(0.5)
    rows = await run.final(*keys, timeout=60)
    assert {r["status"] for r in rows.values()} == {"sent"} and {r["attempts"] for r in rows.values()} == {1}
    assert dict(provider_server.accepted_by_header) == dict.fromkeys(keys, 1), "each email accepted once"
    assert not given_back(caplog), "the slow transport's rows waited unclaimed for its next slot"
