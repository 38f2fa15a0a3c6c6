"""The staging guard in the daemon, against a real SMTP server: the server sees only what it allows."""

from __future__ import annotations

import email
import email.policy
import json
import logging
from typing import Any

import anyio
import pytest

from outbox_mailer.store import Store
from tests.integration.conftest import insert
from tests.integration.test_daemon_batches import settled
from tests.provider_server import ProviderServer
from tests.smtp_server import SmtpTestServer

pytestmark = pytest.mark.anyio


async def test_only_allowed_recipients_get_mail_and_the_others_fail_without_a_connection(
        running: Any, store: Store, smtp_server: SmtpTestServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="outbox_mailer")
    await insert(store, "ok", to_addresses=["QA <qa@shop.example.com>"], cc_addresses=["dev@corp.example.com"])
    await insert(store, "out", to_addresses=["customer@example.net"])
    await insert(store, "bcc-out", to_addresses=["qa@shop.example.com"], bcc_addresses=["Boss <boss@example.org>"])
    r = await running(allowed_recipients="qa@shop.example.com, @*.example.com")
    rows = await r.final("ok", "out", "bcc-out")
    assert rows["ok"]["status"] == "sent"
    for key, address in (("out", "customer@example.net"), ("bcc-out", "boss@example.org")):
        assert rows[key]["status"] == "failed"
        assert rows[key]["last_error"] == f"not in OUTBOX_MAILER_ALLOWED_RECIPIENTS: {address}"
    assert [sorted(m.rcpt_tos) for m in smtp_server.accepted] == [["dev@corp.example.com", "qa@shop.example.com"]]
    assert any("staging guard on: OUTBOX_MAILER_ALLOWED_RECIPIENTS" in rec.getMessage() for rec in caplog.records)


async def test_redirect_sends_everything_to_one_address_and_names_the_originals(
        running: Any, store: Store, smtp_server: SmtpTestServer) -> None:
    await insert(store, "r1", to_addresses=["Zoë <zoe@example.net>", "b@example.net"],
                 cc_addresses=["c@example.net"], bcc_addresses=["hidden@example.net"], subject="Your receipt")
    r = await running(redirect_to="qa@shop.example.com")
    rows = await r.final("r1")
    assert rows["r1"]["status"] == "sent"
    [m] = smtp_server.accepted
    assert m.rcpt_tos == ("qa@shop.example.com",)
    parsed = email.message_from_bytes(m.data, policy=email.policy.default)
    assert parsed["To"] == "qa@shop.example.com" and parsed["Cc"] is None and parsed["Subject"] == "Your receipt"
    assert parsed["X-Original-To"] == "Zoë <zoe@example.net>, b@example.net, c@example.net"
    assert b"hidden" not in m.data
    [attempt] = await store.attempts(rows["r1"]["id"])
    refused = attempt["refused"] if isinstance(attempt["refused"], list) else json.loads(attempt["refused"])
    assert [entry["address"] for entry in refused] == ["hidden@example.net"]


async def test_through_a_provider_batch_the_redirect_holds_as_well(
        db_url: str, store: Store, resend: Any) -> None:
    server = ProviderServer().start()
    await store.execute("INSERT INTO email_deliveries (dedupe_key, to_addresses, cc_addresses, bcc_addresses, "
                        "subject, text_body) SELECT 'p' || g, ARRAY['customer' || g || '@example.net'], "
                        "ARRAY['cc@example.net'], ARRAY['bcc@example.net'], 's', 'b' FROM generate_series(1, 3) g")
    await resend(server, redirect_to="qa@shop.example.com")
    assert set((await settled(store, 3)).values()) == {"sent"}
    bodies = [email for request in server.sends() for email in
              (request.json() if isinstance(request.json(), list) else [request.json()])]
    assert len(bodies) == 3
    for body in bodies:
        assert body["to"] == ["qa@shop.example.com"] and not body.get("cc") and not body.get("bcc")
        assert body["headers"]["X-Original-To"].startswith("customer") and "bcc@" not in str(body)


async def test_a_recorded_batch_restored_into_staging_is_not_replayed_past_the_guard(
        db_url: str, store: Store, resend: Any) -> None:
    server = ProviderServer().start()
    server.add_fault("accept_500", count=1, paths=("/emails/batch",))  # accepted, then a 500: ambiguous
    try:
        await store.execute("INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body) "
                            "SELECT 'b' || g, ARRAY['customer' || g || '@example.net'], 's', 'b' "
                            "FROM generate_series(1, 3) g")
        production = await resend(server, rescue_after_seconds=600)  # gives the batch up to a rescuer
        with anyio.fail_after(10):
            while not await store.fetch("SELECT 1 FROM email_batches"):
                await anyio.sleep(0.05)
        await anyio.sleep(0.3)
        production.stop()
        await store.execute("UPDATE email_deliveries SET claimed_at = now() - interval '1 h'")
        await resend(server, allowed_recipients="@shop.example.com", rescue_after_seconds=4,
                     rescue_interval_seconds=0.2)
        statuses = await settled(store, 3, timeout=20)
        assert set(statuses.values()) == {"failed"}
        errors = {r["last_error"] for r in await store.fetch("SELECT last_error FROM email_deliveries")}
        assert all(e.startswith("not in OUTBOX_MAILER_ALLOWED_RECIPIENTS: customer") for e in errors), errors
        assert len(server.sends("/emails/batch")) == 1, "the batch was not sent again"
    finally:
        server.stop()
