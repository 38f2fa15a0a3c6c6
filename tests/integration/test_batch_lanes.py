"""A batching lane under its provider's rate, with rows trickling in.

A Resend lane whose start window (rescue delay - send timeout - margin: how long after its claim
a send may start) is one second, at 2 requests/s and at one request every 2 s: rows that arrive a
few at a time must all go out, each in one attempt. Waiting for a request slot is not an attempt:
nothing is charged or written for it, and the lane is claimed only what its rate starts in time.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

from tests.integration.test_daemon_batches import insert, resend, settled  # noqa: F401 (resend: a fixture)
from tests.provider_server import ProviderServer
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio


def given_back(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The claims the daemon gave back untried (too old to start a send), from its log."""
    return [m for m in caplog.messages if m.startswith("given back")]


@pytest.mark.parametrize(("rate", "ticks", "rows_per_tick", "every"), [
    (2.0, 30, 5, 0.2),  # 150 rows at 25/s, Resend's default rate
    (0.5, 6, 2, 0.5),  # a request every 2 s (as after throttling): longer than the start window
], ids=["two_requests_a_second", "rate_slower_than_the_start_window"])
async def test_rows_trickling_into_a_rate_limited_batch_lane_are_each_sent_in_one_attempt(
        store: SqlStore, resend: Any, caplog: pytest.LogCaptureFixture,  # noqa: F811
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
            "SELECT d.attempts, count(a.*) AS recorded, count(a.*) FILTER (WHERE a.outcome <> 'sent') AS not_sent "
            "FROM email_deliveries d LEFT JOIN email_delivery_attempts a ON a.delivery_id = d.id GROUP BY d.id")
        assert {(r["attempts"], r["recorded"], r["not_sent"]) for r in attempts} == {(1, 1, 0)}, \
            "each row: one attempt, charged once, and it was the send (waiting for a slot is no attempt)"
        assert not given_back(caplog), "the lane was claimed no more rows than its rate starts in time"
    finally:
        server.stop()
