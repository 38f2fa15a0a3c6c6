"""A daemon stopped while claimed rows wait for a request slot, against the fake provider over loopback HTTP.

A row (or a provider batch of rows) that waits for its transport's shared rate when the stop comes was never
sent: it goes back to ``pending`` untried (attempts as before its claim, no attempt row, its ``last_error`` and
``scheduled_at`` as they were), for the next daemon to send at once. A batch whose request had started when
the stop came may have reached the provider: it stays ``sending`` for a rescuer, which resends it under its
own key, never under a new one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from outbox_mailer.daemon.service import Daemon
from outbox_mailer.settings.transports import ApiTransportSettings
from outbox_mailer.transports.api.http import HttpApiTransport
from tests.in_process_daemon import settings_for
from tests.integration.test_batch_defaults import daemon_with
from tests.integration.test_daemon_batches import insert
from tests.provider_server import ProviderServer
from tests.smtp_server import free_port
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio
ROWS = ("SELECT d.dedupe_key, d.status, d.attempts, d.claim_token, d.last_error, d.scheduled_at, "
        "(SELECT count(*) FROM email_delivery_attempts a WHERE a.delivery_id = d.id) AS recorded "
        "FROM email_deliveries d")


@asynccontextmanager
async def resend_daemon(db_url: str, server: ProviderServer, *, batch: bool, rate: float = 1000, burst: int = 100,
                        **overrides: Any) -> AsyncIterator[Daemon]:
    """A daemon sending through a Resend-like transport at ``server``; on exit, stopped and awaited until its
    run has ended (every outcome it had to write written)."""
    options = {"kind": "resend", "api_key": "test", "base_url": server.base_url, "timeout_seconds": 2,
               "batch": batch, "rate_per_second": rate, "burst": burst}
    transport = HttpApiTransport(ApiTransportSettings(**options), name="resend")
    smtp = {"host": "127.0.0.1", "port": free_port(), "tls": "none", "data_timeout_seconds": 2,
            "send_timeout_seconds": 2}  # unused
    settings = settings_for(db_url, SimpleNamespace(host="127.0.0.1", port=0), smtp=smtp,
                            transports={"resend": options}, default_transport="resend", **overrides)
    async with daemon_with(settings, {"resend": transport}) as daemon:
        yield daemon


async def rows(store: SqlStore) -> dict[str, dict[str, Any]]:
    return {r["dedupe_key"]: dict(r) for r in await store.fetch(ROWS)}


async def until(store: SqlStore, keys: list[str], status: str, timeout: float = 20) -> None:
    with anyio.fail_after(timeout):
        while True:
            now = await rows(store)
            if all(now.get(k, {}).get("status") == status for k in keys):
                return
            await anyio.sleep(0.05)


@pytest.mark.parametrize("batch", [True, False], ids=["a_batch", "a_single_row"])
async def test_rows_waiting_for_their_rate_slot_at_stop_go_back_pending_untried_and_the_sent_ones_stay_sent_once(
        db_url: str, store: SqlStore, batch: bool) -> None:
    server = ProviderServer().start()
    per_request = 3 if batch else 1
    try:
        # one request every 10 s; a start window of 60 - 2 - 1 s: the second request's rows wait for their slot
        # well inside it, and well past the grace period
        async with resend_daemon(db_url, server, batch=batch, rate=0.1, burst=1, rescue_after_seconds=60,
                                 shutdown_grace_seconds=0.5) as daemon:
            first = await insert(store, per_request, prefix="first-")
            await until(store, first, "sent")
            second = await insert(store, per_request, prefix="second-")
            before = await rows(store)
            await until(store, second, "sending")  # claimed: waiting for the next slot
            daemon.stop()
        after = await rows(store)
        assert {k: (after[k]["status"], after[k]["attempts"], after[k]["recorded"]) for k in first + second} == {
            **dict.fromkeys(first, ("sent", 1, 1)), **dict.fromkeys(second, ("pending", 0, 0))}, \
            "the waiting rows are back untried: attempts as before their claim, no attempt written"
        for key in second:
            assert after[key]["claim_token"] is None, "no claim left behind"
            assert (after[key]["last_error"], after[key]["scheduled_at"]) == (
                before[key]["last_error"], before[key]["scheduled_at"]), "due as before: no backoff, no error"
        assert dict(server.accepted_by_header) == dict.fromkeys(first, 1), "the sent ones once, the others never"
        requested = [r.headers.get("idempotency-key") for r in server.sends()]
        assert len(requested) == 1, f"one request, for the first rows only: {requested}"
    finally:
        server.stop()


async def test_a_batch_whose_request_started_before_the_stop_is_left_to_the_rescuer_and_never_sent_under_a_new_key(
        db_url: str, store: SqlStore) -> None:
    server = ProviderServer().start()
    server.add_fault("slow", delay=2.0, count=1, paths=("/emails/batch",))  # the reply comes after the grace period
    try:
        keys = await insert(store, 3, prefix="held-")
        async with resend_daemon(db_url, server, batch=True, shutdown_grace_seconds=0.3) as daemon:
            with anyio.fail_after(20):
                while not server.sends("/emails/batch"):  # the request reached the server: it may be delivered
                    await anyio.sleep(0.05)
            daemon.stop()
        after = await rows(store)
        assert {after[k]["status"] for k in keys} == {"sending"}, "a started request is not given back untried"
        with anyio.fail_after(20):
            while not server.batches:  # the held request is handled: the provider delivered the emails
                await anyio.sleep(0.05)
        await store.execute("UPDATE email_deliveries SET claimed_at = now() - interval '1 hour'")
        async with resend_daemon(db_url, server, batch=True, rescue_interval_seconds=0.1):
            await until(store, keys, "sent")
        requests = server.sends()
        assert {r.path for r in requests} == {"/emails/batch"}, "no member resent singly under its own key"
        assert len({r.headers["idempotency-key"] for r in requests}) == 1, "resent only under the batch's own key"
        assert dict(server.accepted_by_header) == dict.fromkeys(keys, 1), "each email delivered once"
    finally:
        server.stop()
