"""Provider batch sends over real loopback HTTP: ``HttpApiTransport.send_batch`` against the fake
provider server (tests/provider_server.py, batch rules in tests/provider_batches.py).

Resend: one request per batch under the batch key; a replay (after a 5xx, a lost answer or a
timeout) is absorbed and each email is delivered once; the 2 requests/s limit; per-item
errors with permissive validation; a batch refused as a whole sends its members singly.
Postmark: an ``ErrorCode`` per member; no key, so a 5xx is ambiguous without a safe resend.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import anyio
import httpx
import pytest

from outbox_mailer.delivery import BatchOutcome, Cause, ComposedMessage, Delivery, SendSingly
from outbox_mailer.message.compose import compose
from outbox_mailer.providers.seam import batch_idempotency_key
from outbox_mailer.settings.transports import ApiTransportSettings
from outbox_mailer.transports.api.http import HttpApiTransport
from tests.integration.conftest import TOKEN
from tests.message_ids import claimed_message_id
from tests.provider_server import KEY_HEADER, ProviderServer
from tests.smtp_server import free_port

pytestmark = pytest.mark.anyio


def make_delivery(key: str, to: str | None = None, **overrides: Any) -> Delivery:
    now = datetime.now(UTC)
    fields: dict[str, Any] = dict(
        id=1, dedupe_key=key, claim_token=uuid.uuid4(), attempts=1, max_attempts=None,
        from_address="Shop <shop@example.com>", to_addresses=(to or f"{key}@example.com",), cc_addresses=(),
        bcc_addresses=(), reply_to=None, subject=f"about {key}", text_body="body", html_body="<p>body</p>",
        headers={KEY_HEADER: key}, attachments=[], metadata={"order": key}, transport=None, priority=0,
        scheduled_at=now, expires_at=None, created_at=now, first_attempt_at=now,
    )  # fmt: skip
    fields.update(overrides)
    fields.setdefault("message_id", claimed_message_id(fields["dedupe_key"]))
    return Delivery(**fields)


def message_for(delivery: Delivery) -> ComposedMessage:
    return compose(delivery, default_from=None, max_message_bytes=1 << 20,
                   now=datetime.now(UTC))


class Batch:
    """Rows of one batch, their messages and their batch key."""

    def __init__(self, *deliveries: Delivery) -> None:
        self.deliveries = list(deliveries)
        self.messages = [message_for(d) for d in deliveries]
        self.keys = [d.dedupe_key for d in deliveries]
        self.key = batch_idempotency_key(self.keys)

    @classmethod
    def of(cls, prefix: str, count: int) -> Batch:
        return cls(*(make_delivery(f"{prefix}-{i}") for i in range(count)))

    async def send(self, transport: HttpApiTransport) -> list[BatchOutcome]:
        return await transport.send_batch(self.messages, self.deliveries, self.key)


def causes(outcomes: list[BatchOutcome]) -> list[Any]:
    return [SendSingly if isinstance(o, SendSingly) else o.cause for o in outcomes]


@pytest.fixture
async def batch_api(provider_server: ProviderServer) -> AsyncIterator[Callable[..., HttpApiTransport]]:
    """batch_api(kind, server=..., **settings) -> an HttpApiTransport aimed at a provider server; closed at the end."""
    made: list[HttpApiTransport] = []

    def factory(kind: str = "resend", *, server: ProviderServer | None = None, **settings: Any) -> HttpApiTransport:
        target = server or provider_server
        values: dict[str, Any] = {"kind": kind, "timeout_seconds": 5}
        if kind == "http":
            values["url"] = target.hook_url
        else:
            values.update(api_key=TOKEN, base_url=target.base_url)
        values.update(settings)
        transport = HttpApiTransport(ApiTransportSettings(**values), name=kind)
        made.append(transport)
        return transport

    yield factory
    for transport in made:
        await transport.aclose()


@pytest.fixture
def limited_server() -> Iterator[ProviderServer]:
    """A provider server that answers 429 above 2 send requests per second, like Resend by default."""
    server = ProviderServer(rate_per_second=2.0, burst=2).start()
    try:
        yield server
    finally:
        server.stop()


# ---- what batches, and when ----------------------------------------------------------------------


async def test_batch_limit_follows_the_kind_and_the_setting(batch_api: Any) -> None:
    assert (batch_api("resend").batch_limit, batch_api("postmark").batch_limit) == (100, 500)
    assert (batch_api("sendgrid").batch_limit, batch_api("http").batch_limit, batch_api("resend", batch=False).batch_limit) == (0, 0, 0)
    plain, attached = make_delivery("b-1"), make_delivery("b-2", attachments=[
        {"filename": "r.pdf", "content_type": "application/pdf", "content_base64": "JVBERg=="}])
    assert batch_api("resend").batchable(message_for(plain), plain)
    assert not batch_api("resend").batchable(message_for(attached), attached)  # Resend: attachments go singly
    assert batch_api("postmark").batchable(message_for(attached), attached)
    assert not batch_api("resend", batch=False).batchable(message_for(plain), plain)
    assert not batch_api("sendgrid").batchable(message_for(plain), plain)


async def test_send_batch_refuses_members_that_break_its_contract(batch_api: Any, provider_server: ProviderServer
                                                                  ) -> None:
    batch = Batch.of("c", 2)
    with pytest.raises(ValueError, match="does not batch"):
        await batch.send(batch_api("resend", batch=False))
    with pytest.raises(ValueError, match="cannot go in a batch"):
        attached = make_delivery("c-att", attachments=[
            {"filename": "r.pdf", "content_type": "application/pdf", "content_base64": "JVBERg=="}])
        await Batch(*batch.deliveries, attached).send(batch_api())
    with pytest.raises(ValueError, match="takes 1-100 members"):
        await batch_api().send_batch(batch.messages, batch.deliveries[:1], batch.key)
    assert provider_server.sends() == []


# ---- Resend ---------------------------------------------------------------------------------------


async def test_resend_batch_is_one_request_under_the_batch_key_and_each_member_gets_its_id(
        batch_api: Any, provider_server: ProviderServer) -> None:
    batch = Batch.of("r", 3)
    outcomes = await batch.send(batch_api())
    assert causes(outcomes) == [Cause.SENT] * 3
    ids = [o.provider_message_id for o in outcomes]  # type: ignore[union-attr]
    assert all(ids) and len(set(ids)) == 3
    [request] = provider_server.sends()
    assert request.path == "/emails/batch" and request.headers["idempotency-key"] == batch.key
    assert request.headers["x-batch-validation"] == "permissive"
    assert [email["to"] for email in request.json()] == [[f"r-{i}@example.com"] for i in range(3)]
    assert provider_server.accepted_by_header == {key: 1 for key in batch.keys}
    assert provider_server.batches == {batch.key: 1}


async def test_resend_batch_sent_again_with_the_same_key_is_replayed_and_delivers_nothing_again(
        batch_api: Any, provider_server: ProviderServer) -> None:
    transport, batch = batch_api(), Batch.of("rr", 3)
    first, second = await batch.send(transport), await batch.send(transport)
    assert causes(first) == causes(second) == [Cause.SENT] * 3
    assert [o.provider_message_id for o in first] == [o.provider_message_id for o in second]  # type: ignore[union-attr]
    assert provider_server.replays == 1 and provider_server.accepted == {key: 1 for key in batch.keys}


@pytest.mark.parametrize("fault", ["accept_500", "accept_drop", "drop"])
async def test_resend_batch_without_a_good_answer_is_ambiguous_and_its_replay_delivers_each_email_once(
        batch_api: Any, provider_server: ProviderServer, fault: str) -> None:
    provider_server.add_fault(fault, count=1)  # faults apply to batch paths too
    transport, batch = batch_api(), Batch.of(f"amb-{fault}", 3)
    outcomes = await batch.send(transport)
    assert causes(outcomes) == [Cause.AMBIGUOUS] * 3
    assert all(o.charge_attempt and o.resend_safe_until is not None  # type: ignore[union-attr]
               and o.resend_safe_until > datetime.now(UTC) for o in outcomes)  # type: ignore[union-attr]
    if fault == "accept_500":
        assert {o.reply_code for o in outcomes} == {500}  # type: ignore[union-attr]
    again = await batch.send(transport)
    assert causes(again) == [Cause.SENT] * 3
    assert provider_server.accepted == {key: 1 for key in batch.keys}
    assert provider_server.replays == (0 if fault == "drop" else 1)


async def test_resend_batch_without_an_answer_in_time_is_ambiguous_and_the_replay_is_absorbed(
        batch_api: Any, provider_server: ProviderServer) -> None:
    provider_server.add_fault("slow", delay=1.5, count=1)
    transport, batch = batch_api(timeout_seconds=0.5), Batch.of("slow", 2)
    outcomes = await batch.send(transport)
    assert provider_server.keys[batch.key].in_progress, "the client gave up while the provider still held the request"
    assert causes(outcomes) == [Cause.AMBIGUOUS] * 2
    assert all("may have accepted the batch" in o.error for o in outcomes)  # type: ignore[union-attr,operator]
    with anyio.fail_after(10):  # the provider finishes the first request
        while provider_server.keys[batch.key].in_progress:
            await anyio.sleep(0.02)
    assert causes(await batch.send(transport)) == [Cause.SENT] * 2
    assert provider_server.accepted == {key: 1 for key in batch.keys} and provider_server.replays == 1


async def test_batch_to_a_server_that_is_not_there_is_unreachable_for_every_member(batch_api: Any) -> None:
    outcomes = await Batch.of("gone", 2).send(batch_api(base_url=f"http://127.0.0.1:{free_port()}"))
    assert causes(outcomes) == [Cause.UNREACHABLE] * 2 and not any(o.charge_attempt for o in outcomes)  # type: ignore[union-attr]


async def test_resend_two_requests_per_second_limit_answers_429_and_the_batch_goes_later(
        batch_api: Any, limited_server: ProviderServer) -> None:
    transport = batch_api(server=limited_server)
    batches = [Batch.of(f"rate{n}", 5) for n in range(3)]
    first, second, third = [await batch.send(transport) for batch in batches]
    assert causes(first) == causes(second) == [Cause.SENT] * 5
    assert causes(third) == [Cause.TRANSIENT] * 5 and limited_server.rate_limit.refused == 1  # type: ignore[union-attr]
    waits = {o.retry_after_seconds for o in third}  # type: ignore[union-attr]
    assert waits == {1.0} and all("rate_limit_exceeded" in o.error for o in third)  # type: ignore[union-attr,operator]
    assert not any(limited_server.accepted_by_header[key] for key in batches[2].keys)
    await anyio.sleep(1.0)
    assert causes(await batches[2].send(transport)) == [Cause.SENT] * 5
    assert limited_server.accepted == {key: 1 for batch in batches for key in batch.keys}  # 15 emails, 4 requests


async def test_resend_permissive_validation_fails_only_the_invalid_member(
        batch_api: Any, provider_server: ProviderServer) -> None:
    batch = Batch(make_delivery("pv-0"), make_delivery("pv-1", to="malformed@example.com"), make_delivery("pv-2"))
    outcomes = await batch.send(batch_api())
    assert causes(outcomes) == [Cause.SENT, Cause.PERMANENT, Cause.SENT]
    assert "batch item 1: Invalid `to` field." in outcomes[1].error  # type: ignore[union-attr,operator]
    assert provider_server.accepted_by_header == {"pv-0": 1, "pv-2": 1}


async def test_resend_batch_refused_as_a_whole_sends_each_member_singly_and_each_is_delivered_once(
        batch_api: Any, provider_server: ProviderServer) -> None:
    provider_server.add_fault("reply", status=422, body={"statusCode": 422, "name": "validation_error",
                                                         "message": f"bad batch for key {TOKEN}"}, count=1,
                              paths=("/emails/batch",))
    transport, batch = batch_api(), Batch.of("whole", 3)
    outcomes = await batch.send(transport)
    assert causes(outcomes) == [SendSingly] * 3 and provider_server.accepted == {}
    assert all(o.reply_code == 422 and "bad batch for key **********" in o.reason  # type: ignore[union-attr]
               for o in outcomes)  # the API key never shows, as in any outcome
    singly = [await transport.send(m, d) for m, d in zip(batch.messages, batch.deliveries, strict=True)]
    assert [o.cause for o in singly] == [Cause.SENT] * 3
    assert [r.path for r in provider_server.sends()] == ["/emails/batch", "/emails", "/emails", "/emails"]
    assert provider_server.accepted == {key: 1 for key in batch.keys}  # single sends count by the row's key


async def test_resend_batch_key_reused_with_another_payload_is_ambiguous_and_sends_nothing(
        batch_api: Any, provider_server: ProviderServer) -> None:
    transport, batch = batch_api(), Batch.of("conf", 2)
    assert causes(await batch.send(transport)) == [Cause.SENT] * 2
    changed = Batch(make_delivery("conf-0", subject="another subject"), batch.deliveries[1])
    outcomes = await transport.send_batch(changed.messages, changed.deliveries, batch.key)
    assert causes(outcomes) == [Cause.AMBIGUOUS] * 2 and all(o.resend_safe_until is None for o in outcomes)  # type: ignore[union-attr]
    assert provider_server.conflicts == 1 and provider_server.accepted == {key: 1 for key in batch.keys}


async def test_resend_with_a_wrong_key_pauses_every_member_and_never_shows_the_key(batch_api: Any) -> None:
    outcomes = await Batch.of("auth", 2).send(batch_api(api_key="re_wrong_secret"))
    assert causes(outcomes) == [Cause.PAUSED] * 2
    assert all("re_wrong_secret" not in o.error and not o.charge_attempt for o in outcomes)  # type: ignore[union-attr,operator]


async def test_closed_transport_holds_every_member_back(batch_api: Any, provider_server: ProviderServer) -> None:
    transport = batch_api()
    await transport.aclose()
    assert causes(await Batch.of("closed", 2).send(transport)) == [Cause.HELD_BACK] * 2
    assert provider_server.sends() == []


# ---- the fake's Resend batch rules, straight over HTTP ----------------------------------------------


async def test_the_fake_refuses_attachments_and_more_than_a_hundred_emails_in_a_resend_batch(
        batch_api: Any, provider_server: ProviderServer) -> None:
    ok = make_delivery("ok")
    good = batch_api().provider._document(message_for(ok).fields, ok)  # what send_batch would carry for it
    attached = {**good, "headers": {KEY_HEADER: "att"}, "attachments": [{"filename": "r.pdf", "content": "JVBERg=="}]}
    document = [good, attached]
    headers = {"Authorization": f"Bearer {TOKEN}", "Idempotency-Key": "k-att"}
    async with httpx.AsyncClient(base_url=provider_server.base_url) as client:
        strict = await client.post("/emails/batch", json=document, headers={**headers, "Idempotency-Key": "k-s"})
        permissive = await client.post("/emails/batch", json=document,
                                       headers={**headers, "x-batch-validation": "permissive"})
        too_many = await client.post("/emails/batch", json=[document[0]] * 101,
                                     headers={**headers, "Idempotency-Key": "k-101"})
    assert strict.status_code == 422 and "attachments" in strict.json()["message"]
    assert permissive.status_code == 200 and len(permissive.json()["data"]) == 1
    assert permissive.json()["errors"][0]["index"] == 1 and "attachments" in permissive.json()["errors"][0]["message"]
    assert too_many.status_code == 422 and "1 to 100" in too_many.json()["message"]
    assert provider_server.accepted_by_header == {"ok": 1}  # the permissive batch's good member alone


# ---- Postmark -------------------------------------------------------------------------------------


async def test_postmark_batch_gives_each_member_the_outcome_of_its_own_error_code(
        batch_api: Any, provider_server: ProviderServer) -> None:
    batch = Batch(make_delivery("pm-0"), make_delivery("pm-1", to="inactive@example.com"),
                  make_delivery("pm-2", to="malformed@example.com"), make_delivery("pm-3"))
    outcomes = await batch.send(batch_api("postmark"))
    assert causes(outcomes) == [Cause.SENT, Cause.PERMANENT, Cause.PERMANENT, Cause.SENT]
    assert "ErrorCode 406" in outcomes[1].error and "ErrorCode 300" in outcomes[2].error  # type: ignore[union-attr,operator]
    assert all(o.provider_message_id for o in (outcomes[0], outcomes[3]))  # type: ignore[union-attr]
    [request] = provider_server.sends()
    assert request.path == "/email/batch" and "idempotency-key" not in request.headers
    assert provider_server.accepted_by_header == {"pm-0": 1, "pm-3": 1}


async def test_postmark_batch_5xx_is_ambiguous_without_a_safe_resend(
        batch_api: Any, provider_server: ProviderServer) -> None:
    provider_server.add_fault("accept_500", count=1)
    batch = Batch.of("pm5", 2)
    outcomes = await batch.send(batch_api("postmark"))
    assert causes(outcomes) == [Cause.AMBIGUOUS] * 2
    assert all(o.resend_safe_until is None for o in outcomes)  # type: ignore[union-attr]  # in_doubt decides
    assert provider_server.accepted_by_header == {key: 1 for key in batch.keys}  # it had been accepted


async def test_postmark_batch_with_a_wrong_token_pauses_every_member(batch_api: Any) -> None:
    outcomes = await Batch.of("pmauth", 3).send(batch_api("postmark", api_key="wrong"))
    assert causes(outcomes) == [Cause.PAUSED] * 3
