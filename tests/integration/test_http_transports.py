"""Provider API transports against a real HTTP server on loopback (tests/provider_server.py).

First each provider's answers through ``HttpApiTransport.send`` and ``check``, then the
daemon in-process: key replay, quota and credential pauses that charge no attempt,
ambiguous 5xx resent inside the key window with ``in_doubt=hold``, the rate limit
held over 10 s, and an unknown transport name.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest

from outbox_mailer.delivery import ComposedMessage, Delivery, OutcomeKind
from outbox_mailer.errors import TransportUnavailable
from outbox_mailer.message.compose import compose
from outbox_mailer.store import Store
from outbox_mailer.transports.api.http import HttpApiTransport
from tests.in_process_daemon import Running
from tests.integration.conftest import TOKEN, insert
from tests.message_ids import claimed_message_id
from tests.provider_server import KEY_HEADER, ProviderServer
from tests.smtp_server import free_port

pytestmark = pytest.mark.anyio

def make_delivery(key: str = "key-1", **overrides: Any) -> Delivery:
    now = datetime.now(UTC)
    fields: dict[str, Any] = dict(
        id=1, dedupe_key=key, claim_token=uuid.uuid4(), attempts=1, max_attempts=None,
        from_address="Shop <shop@example.com>", to_addresses=("Zoë <zoe@example.com>",), cc_addresses=(),
        bcc_addresses=(), reply_to=None, subject="hello", text_body="body", html_body="<p>body</p>",
        headers={KEY_HEADER: key}, attachments=[], metadata={"order": 42}, transport=None, priority=0,
        scheduled_at=now, expires_at=None, created_at=now, first_attempt_at=now,
    )  # fmt: skip
    fields.update(overrides)
    fields.setdefault("message_id", claimed_message_id(fields["dedupe_key"]))
    return Delivery(**fields)


def message_for(delivery: Delivery) -> ComposedMessage:
    return compose(delivery, default_from=None, max_message_bytes=1 << 20,
                   now=datetime.now(UTC))


async def send(transport: HttpApiTransport, delivery: Delivery) -> Any:
    return await transport.send(message_for(delivery), delivery)


# ---- Resend, one send at a time ---------------------------------------------------------------


async def test_resend_sent_with_key_and_bearer(api: Any, provider_server: ProviderServer) -> None:
    outcome = await send(api(), make_delivery("r-1"))
    assert outcome.kind is OutcomeKind.SENT and outcome.reply_code == 200 and outcome.provider_message_id
    [request] = provider_server.sends("/emails")
    assert request.headers["idempotency-key"] == "r-1" and request.headers["authorization"] == f"Bearer {TOKEN}"
    body = request.json()
    assert body["to"] == ["Zoë <zoe@example.com>"]
    assert body["tags"] == [{"name": "order", "value": "42"}, {"name": "dedupe_key", "value": "r-1"}]
    assert provider_server.accepted == {"r-1": 1}


async def test_resend_repeat_with_the_same_key_is_replayed_and_accepted_once(
        api: Any, provider_server: ProviderServer) -> None:
    transport, delivery = api(), make_delivery("r-2")
    first, second = await send(transport, delivery), await send(transport, delivery)
    assert first.kind is second.kind is OutcomeKind.SENT
    assert first.provider_message_id == second.provider_message_id
    assert provider_server.accepted == {"r-2": 1} and provider_server.replays == 1


async def test_resend_same_key_other_payload_is_permanent(api: Any, provider_server: ProviderServer) -> None:
    transport = api()
    assert (await send(transport, make_delivery("r-3"))).kind is OutcomeKind.SENT
    outcome = await send(transport, make_delivery("r-3", subject="another subject"))
    assert outcome.kind is OutcomeKind.PERMANENT and outcome.reply_code == 409
    assert "invalid_idempotent_request" in outcome.error and provider_server.conflicts == 1


async def test_resend_same_key_while_in_progress_is_transient(api: Any, provider_server: ProviderServer) -> None:
    provider_server.add_fault("slow", delay=1.0, count=1)
    transport, delivery = api(), make_delivery("r-4")
    outcomes: list[Any] = []

    async def one(delay: float) -> None:
        await anyio.sleep(delay)
        outcomes.append(await send(transport, delivery))

    async with anyio.create_task_group() as tg:
        tg.start_soon(one, 0)
        tg.start_soon(one, 0.3)
    concurrent, first = outcomes
    assert first.kind is OutcomeKind.SENT
    assert concurrent.kind is OutcomeKind.TRANSIENT and concurrent.retry_after_seconds == 1.0
    assert "concurrent_idempotent_requests" in concurrent.error and concurrent.charge_attempt
    assert provider_server.accepted == {"r-4": 1}


@pytest.mark.parametrize(("status", "name"), [(422, "validation_error"), (400, "invalid_attachment")])
async def test_resend_refused_request_is_permanent(api: Any, provider_server: ProviderServer, status: int,
                                                   name: str) -> None:
    provider_server.add_fault("reply", status=status, body={"statusCode": status, "name": name, "message": "no"},
                              count=1)
    outcome = await send(api(), make_delivery())
    assert outcome.kind is OutcomeKind.PERMANENT and outcome.reply_code == status and name in outcome.error


async def test_resend_429_is_transient_with_retry_after(api: Any, provider_server: ProviderServer) -> None:
    provider_server.add_fault("reply", status=429, body={"name": "rate_limit_exceeded", "message": "Too many"},
                              headers={"Retry-After": "2"}, count=1)
    outcome = await send(api(), make_delivery())
    assert outcome.kind is OutcomeKind.TRANSIENT and outcome.retry_after_seconds == 2.0
    assert outcome.pause_seconds is None and provider_server.accepted == {}


async def test_resend_quota_pauses(api: Any, provider_server: ProviderServer) -> None:
    provider_server.add_fault("reply", status=429, body={"name": "daily_quota_exceeded", "message": "quota"},
                              headers={"Retry-After": "60"}, count=1)
    outcome = await send(api(), make_delivery())
    assert outcome.pause_seconds == 60 and not outcome.charge_attempt


async def test_resend_wrong_key_pauses_and_never_shows_the_key(api: Any, provider_server: ProviderServer) -> None:
    outcome = await send(api(api_key="re_wrong_secret"), make_delivery())
    assert outcome.kind is OutcomeKind.TRANSIENT and outcome.pause_seconds == 300 and not outcome.charge_attempt
    assert outcome.reply_code == 403 and "credentials refused: check api_key" in outcome.error
    assert "re_wrong_secret" not in outcome.error


@pytest.mark.parametrize("fault", ["accept_500", "accept_drop"])
async def test_resend_accepted_then_lost_answer_is_ambiguous_and_a_resend_is_absorbed(
        api: Any, provider_server: ProviderServer, fault: str) -> None:
    provider_server.add_fault(fault, count=1)
    transport, delivery = api(), make_delivery("r-5")
    outcome = await send(transport, delivery)
    assert outcome.kind is OutcomeKind.AMBIGUOUS
    assert outcome.resend_safe_until is not None and outcome.resend_safe_until > datetime.now(UTC)
    if fault == "accept_500":
        assert outcome.reply_code == 500 and "application_error" in outcome.error
    again = await send(transport, delivery)
    assert again.kind is OutcomeKind.SENT
    assert provider_server.accepted == {"r-5": 1} and provider_server.replays == 1


async def test_resend_no_answer_within_the_timeout_is_ambiguous(api: Any, provider_server: ProviderServer) -> None:
    provider_server.add_fault("slow", delay=1.5, count=1)
    outcome = await send(api(timeout_seconds=0.5), make_delivery())
    [request] = provider_server.keys.values()
    assert request.in_progress, "the client gave up while the provider still held the request"
    assert outcome.kind is OutcomeKind.AMBIGUOUS and "may have accepted" in outcome.error
    assert outcome.resend_safe_until is not None


async def test_unreachable_server_is_transient_and_not_charged(api: Any) -> None:
    outcome = await send(api(base_url=f"http://127.0.0.1:{free_port()}"), make_delivery())
    assert outcome.kind is OutcomeKind.TRANSIENT and not outcome.charge_attempt and outcome.pause_seconds is None
    assert "ConnectError" in outcome.error


async def test_resend_check(api: Any, provider_server: ProviderServer) -> None:
    assert "HTTP 200 (credentials accepted)" in await api().check()
    assert provider_server.sends() == []  # a check sends nothing
    with pytest.raises(TransportUnavailable, match="credentials refused") as refused:
        await api(api_key="re_wrong_secret").check()
    assert "re_wrong_secret" not in str(refused.value)
    with pytest.raises(TransportUnavailable, match="ConnectError"):
        await api(base_url=f"http://127.0.0.1:{free_port()}").check()


# ---- Postmark, SendGrid, webhook ---------------------------------------------------------------


async def test_postmark_answers(api: Any, provider_server: ProviderServer) -> None:
    transport = api("postmark")
    sent = await send(transport, make_delivery("p-1"))
    assert sent.kind is OutcomeKind.SENT and sent.provider_message_id
    [request] = provider_server.sends("/email")
    assert request.headers["x-postmark-server-token"] == TOKEN and request.json()["To"] == "Zoë <zoe@example.com>"
    assert request.json()["Metadata"] == {"order": "42", "dedupe_key": "p-1"}
    inactive = await send(transport, make_delivery("p-2", to_addresses=("inactive@example.com",)))
    assert inactive.kind is OutcomeKind.PERMANENT and "ErrorCode 406" in inactive.error
    provider_server.add_fault("reply", status=422, body={"ErrorCode": 429, "Message": "Rate limit"}, count=1)
    assert (await send(transport, make_delivery("p-3"))).kind is OutcomeKind.TRANSIENT
    provider_server.add_fault("accept_500", count=1)
    ambiguous = await send(transport, make_delivery("p-4"))
    assert ambiguous.kind is OutcomeKind.AMBIGUOUS and ambiguous.resend_safe_until is None
    refused = await send(api("postmark", api_key="wrong"), make_delivery("p-5"))
    assert refused.pause_seconds == 300 and "credentials refused" in refused.error
    assert "HTTP 200" in await transport.check()
    with pytest.raises(TransportUnavailable):
        await api("postmark", api_key="wrong").check()


async def test_sendgrid_answers(api: Any, provider_server: ProviderServer) -> None:
    transport = api("sendgrid")
    sent = await send(transport, make_delivery("s-1"))
    assert sent.kind is OutcomeKind.SENT and sent.reply_code == 202 and sent.provider_message_id
    [request] = provider_server.sends("/v3/mail/send")
    assert request.json()["personalizations"] == [{"to": [{"email": "zoe@example.com", "name": "Zoë"}]}]
    provider_server.add_fault("reply", status=429, body={"errors": [{"message": "too many"}]},
                              headers={"Retry-After": "3"}, count=1)
    limited = await send(transport, make_delivery("s-2"))
    assert limited.kind is OutcomeKind.TRANSIENT and limited.retry_after_seconds == 3.0
    provider_server.add_fault("reply", status=413, body={"errors": [{"message": "too large"}]}, count=1)
    assert (await send(transport, make_delivery("s-3"))).kind is OutcomeKind.PERMANENT
    provider_server.add_fault("accept_drop", count=1)
    dropped = await send(transport, make_delivery("s-4"))
    assert dropped.kind is OutcomeKind.AMBIGUOUS and dropped.resend_safe_until is None
    refused = await send(api("sendgrid", api_key="wrong"), make_delivery("s-5"))
    assert refused.pause_seconds == 300
    assert "credentials accepted" in await transport.check()


async def test_webhook_signed_bearer_request_is_verified_by_the_receiver(
        api: Any, provider_server: ProviderServer) -> None:
    provider_server.hook_bearer, provider_server.signing_secret = "tok", "whsec"
    transport = api("http", api_key="tok", signing_secret="whsec")
    sent = await send(transport, make_delivery("h-1"))
    assert sent.kind is OutcomeKind.SENT and sent.provider_message_id.startswith("hook-")
    [request] = provider_server.sends("/hook")
    assert request.json()["dedupe_key"] == "h-1" and request.headers["idempotency-key"] == "h-1"
    again = await send(transport, make_delivery("h-1"))  # the receiver de-duplicates by the key
    assert again.provider_message_id == sent.provider_message_id and provider_server.accepted == {"h-1": 1}
    forged = await send(api("http", api_key="tok", signing_secret="not-the-secret"), make_delivery("h-2"))
    assert forged.pause_seconds == 300 and "whsec" not in forged.error
    provider_server.add_fault("reply", status=503, body={"message": "maintenance"}, headers={"Retry-After": "4"},
                              count=1)
    busy = await send(transport, make_delivery("h-3"))
    assert busy.kind is OutcomeKind.TRANSIENT and busy.retry_after_seconds == 4.0
    provider_server.add_fault("reply", status=408, count=1)
    assert (await send(transport, make_delivery("h-4"))).kind is OutcomeKind.TRANSIENT
    provider_server.add_fault("reply", status=400, body={"message": "bad"}, count=1)
    assert (await send(transport, make_delivery("h-5"))).kind is OutcomeKind.PERMANENT
    provider_server.add_fault("accept_500", count=1)
    ambiguous = await send(transport, make_delivery("h-6"))
    assert ambiguous.kind is OutcomeKind.AMBIGUOUS and ambiguous.resend_safe_until is None
    assert "reachable" in await transport.check()
    assert len(provider_server.sends("/hook")) == 7  # the check (a HEAD) sent nothing


# ---- through the daemon (the ``daemon`` fixture, tests/integration/conftest.py) ----------------


def resend_settings(server: ProviderServer, **settings: Any) -> dict[str, Any]:
    values: dict[str, Any] = {"kind": "resend", "api_key": TOKEN, "base_url": server.base_url,
                              "timeout_seconds": 2, "rate_per_second": 1000, "burst": 100, "batch": False}
    values.update(settings)
    return values


async def rows_with(run: Running, keys: list[str], transport: str = "resend") -> None:
    for key in keys:
        await insert(run.store, key, transport=transport, headers={KEY_HEADER: key})


async def test_daemon_sends_through_resend_and_lost_answers_are_absorbed_by_the_key(
        api: Any, daemon: Any, provider_server: ProviderServer) -> None:
    provider_server.add_fault("accept_drop", count=3)
    run = await daemon({"resend": api()}, {"resend": resend_settings(provider_server)}, default_transport="resend")
    keys = [f"d-{i}" for i in range(10)]
    for key in keys:
        await insert(run.store, key, headers={KEY_HEADER: key})  # transport null: the default, resend
    rows = await run.final(*keys)
    assert {r["status"] for r in rows.values()} == {"sent"}
    assert all(r["provider_message_id"] for r in rows.values())
    assert provider_server.accepted == {key: 1 for key in keys}
    assert provider_server.replays == 3  # the three lost answers were resent and replayed, not sent again
    assert sum(r["attempts"] for r in rows.values()) == 13


async def assert_pause_charges_nothing(run: Running, server: ProviderServer, keys: list[str],
                                       pause: float) -> int:
    """Wait for the fault to be met, watch nothing being sent during the pause, clear the fault."""
    with anyio.fail_after(10):
        while not any(r.status in (401, 403, 429) for r in server.sends()):
            await anyio.sleep(0.02)
    met = time.monotonic()
    await anyio.sleep(0.3)
    during = len(server.sends())
    await anyio.sleep(max(0.0, pause - 0.8 - (time.monotonic() - met)))
    assert len(server.sends()) == during, "requests were sent through a paused transport"
    server.clear_faults()
    rows = await run.final(*keys, timeout=pause + 10)
    assert {r["status"] for r in rows.values()} == {"sent"}
    assert {r["attempts"] for r in rows.values()} == {1}, "the pause charged attempts"
    assert server.accepted == {key: 1 for key in keys}
    return during


async def test_daemon_quota_exhausted_pauses_the_transport_and_charges_no_attempt(
        api: Any, daemon: Any, store: Store, provider_server: ProviderServer) -> None:
    provider_server.add_fault("reply", status=429, headers={"Retry-After": "3"},
                              body={"name": "daily_quota_exceeded", "message": "You have reached your daily quota"})
    transport = api(max_parallel=2)
    run = await daemon({"resend": transport}, {"resend": resend_settings(provider_server, max_parallel=2)})
    keys = [f"q-{i}" for i in range(6)]
    await rows_with(run, keys)
    refused = await assert_pause_charges_nothing(run, provider_server, keys, pause=3)
    assert refused <= 2  # at most the sends already in flight met the quota
    [row] = await store.status(["q-0"])
    attempts = await store.attempts(row["id"])
    assert attempts[-1]["outcome"] == "sent" and attempts[-1]["attempt"] == 1


async def test_daemon_refused_credentials_pause_loudly_and_charge_no_attempt(
        api: Any, daemon: Any, provider_server: ProviderServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="outbox_mailer")
    provider_server.add_fault("reply", status=401, body={"name": "missing_api_key", "message": "Missing API key"})
    run = await daemon({"resend": api(auth_pause_seconds=2.5, max_parallel=1)},
                       {"resend": resend_settings(provider_server, max_parallel=1)})
    keys = [f"a-{i}" for i in range(4)]
    await rows_with(run, keys)
    refused = await assert_pause_charges_nothing(run, provider_server, keys, pause=2.5)
    assert refused == 1
    paused = [r for r in caplog.records if "paused" in r.getMessage() and r.levelno >= logging.ERROR]
    assert paused and "credentials refused: check api_key" in paused[0].getMessage()
    assert TOKEN not in " ".join(r.getMessage() for r in caplog.records if "Bearer" in r.getMessage())


async def test_daemon_ambiguous_5xx_with_hold_is_resent_inside_the_key_window_and_accepted_once(
        api: Any, daemon: Any, store: Store, provider_server: ProviderServer) -> None:
    provider_server.add_fault("accept_500", count=1)
    run = await daemon({"resend": api()}, {"resend": resend_settings(provider_server)}, in_doubt="hold")
    await rows_with(run, ["amb-1"])
    [row] = (await run.final("amb-1")).values()
    assert row["status"] == "sent" and row["attempts"] == 2
    assert provider_server.accepted == {"amb-1": 1} and provider_server.replays == 1
    outcomes = [a["outcome"] for a in await store.attempts(row["id"])]
    assert outcomes == ["ambiguous", "sent"]


async def test_daemon_ambiguous_5xx_with_hold_without_a_key_window_is_held(
        api: Any, daemon: Any, provider_server: ProviderServer) -> None:
    provider_server.add_fault("accept_500", count=1)
    run = await daemon({"postmark": api("postmark")},
                       {"postmark": resend_settings(provider_server, kind="postmark")}, in_doubt="hold")
    await rows_with(run, ["amb-2"], transport="postmark")
    [row] = (await run.final("amb-2")).values()
    assert row["status"] == "in_doubt" and "outcome unknown" in row["last_error"]
    assert provider_server.accepted == {"amb-2": 1}


@pytest.mark.alone  # a rate or timing bound: no other test meanwhile (tests/conftest.py)
async def test_daemon_rate_limit_holds_within_ten_percent_over_ten_seconds(
        api: Any, daemon: Any, provider_server: ProviderServer) -> None:
    rate, window = 20.0, 10.0
    run = await daemon({"resend": api(max_parallel=4)},
                       {"resend": resend_settings(provider_server, rate_per_second=rate, burst=1, max_parallel=4)},
                       concurrency=16)
    keys = [f"rate-{i}" for i in range(int(rate * (window + 3)))]
    await rows_with(run, keys)
    with anyio.fail_after(10):
        while not provider_server.accepted_times:
            await anyio.sleep(0.01)
    start = provider_server.accepted_times[0]
    await anyio.sleep(window + 0.5 - (time.monotonic() - start))
    counted = provider_server.accepted_between(start, start + window)
    print(f"rate limit: {counted} requests accepted in {window:g} s at a configured {rate:g}/s "
          f"({counted / window:.2f}/s)")
    assert abs(counted - rate * window) <= 0.1 * rate * window, counted
    assert provider_server.accepted_between(start, start + window) < len(keys)  # the backlog outlasted the window


async def test_daemon_unknown_transport_fails_that_row_only(
        api: Any, daemon: Any, provider_server: ProviderServer) -> None:
    run = await daemon({"resend": api()}, {"resend": resend_settings(provider_server)}, default_transport="resend")
    await insert(run.store, "u-1", transport="nope")
    await insert(run.store, "u-2")
    rows = await run.final("u-1", "u-2")
    assert rows["u-1"]["status"] == "failed" and "unknown transport 'nope'" in rows["u-1"]["last_error"]
    assert rows["u-2"]["status"] == "sent"


# ---- internationalised addresses (RFC 6531): passed to the provider as UTF-8 JSON ----------------


@pytest.mark.parametrize(("kind", "path"), [("resend", "/emails"), ("postmark", "/email"),
                                            ("sendgrid", "/v3/mail/send"), ("http", None)])
async def test_an_internationalised_address_reaches_the_provider_intact(
        api: Any, provider_server: ProviderServer, kind: str, path: str | None) -> None:
    delivery = make_delivery(f"eai-{kind}", from_address="Zoë <zoë@example.com>", to_addresses=("jörg@example.com",))
    assert (await send(api(kind), delivery)).kind is OutcomeKind.SENT
    [request] = provider_server.requests if path is None else provider_server.sends(path)
    raw = json.dumps(request.json(), ensure_ascii=False)
    assert "zoë@example.com" in raw and "jörg@example.com" in raw  # not punycoded, not encoded words
