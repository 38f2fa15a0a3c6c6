"""A batching lane under its provider's rate, with rows trickling in.

A Resend lane at 2 requests/s whose safe start window (rescue delay - send timeout - margin) is
one second: rows that arrive a few at a time must all go out, each in one attempt. Waiting for a
request slot is not an attempt: nothing is charged or written for it.
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


async def test_rows_trickling_into_a_rate_limited_batch_lane_are_each_sent_in_one_attempt(
        store: SqlStore, resend: Any, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    caplog.set_level(logging.DEBUG, logger="outbox_mailer")
    server = ProviderServer().start()
    try:
        # send timeout 2 s, rescue delay 4 s: a send may start up to 1 s after its claim
        await resend(server, rate=2, rescue_after_seconds=4, rescue_interval_seconds=0.5)
        keys: list[str] = []
        for tick in range(30):  # 150 rows, 5 at a time, while the daemon sends
            keys += await insert(store, 5, prefix=f"t{tick}-")
            await anyio.sleep(0.2)
        assert set((await settled(store, len(keys), timeout=90)).values()) == {"sent"}
        assert dict(server.accepted_by_header) == dict.fromkeys(keys, 1), "each email accepted once"
        attempts = await store.fetch(
            "SELECT d.dedupe_key, d.attempts, count(a.*) AS recorded, "
            "       count(a.*) FILTER (WHERE a.outcome <> 'sent') AS not_sent "
            "FROM email_deliveries d LEFT JOIN email_delivery_attempts a ON a.delivery_id = d.id "
            "GROUP BY d.dedupe_key, d.attempts")
        waited = await store.fetch("SELECT count(*) AS n FROM email_delivery_attempts WHERE error LIKE '%waited%'")
        assert waited[0]["n"] == 0, "waiting for a request slot is never written as an attempt"
        assert {(r["attempts"], r["recorded"], r["not_sent"]) for r in attempts} == {(1, 1, 0)}, \
            "each row: one attempt, charged once, and it was the send"
        given_back = [r for r in caplog.records if r.getMessage().startswith("given back")]
        assert not given_back, "the lane claimed no more rows than its rate starts in time"
    finally:
        server.stop()
