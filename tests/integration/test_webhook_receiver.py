"""The webhook receiver on loopback (Starlette on uvicorn) against a real PostgreSQL: each answer of the
bad-input matrix, events written once, automatic suppression, 503 while the database is gone."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from outbox_mailer.delivery_events import ses
from outbox_mailer.devtools.pgcluster import TemporaryPostgres
from outbox_mailer.receiver.server import Receiver, build_app
from outbox_mailer.serving.http_server import serve_http
from outbox_mailer.settings.config import Settings
from outbox_mailer.store import EventStore
from outbox_mailer.store.migrations import load_migrations
from tests.integration.test_delivery_events import send_one
from tests.smtp_server import free_port
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio

RESEND_SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
MAILGUN_KEY = "key-" + secrets.token_hex(16)


def svix_headers(body: bytes, msg_id: str, *, secret: str = RESEND_SECRET, at: float | None = None) -> dict[str, str]:
    stamp = str(int(at if at is not None else time.time()))
    key = base64.b64decode(secret.removeprefix("whsec_"))
    sig = base64.b64encode(hmac.new(key, f"{msg_id}.{stamp}.".encode() + body, hashlib.sha256).digest()).decode()
    return {"svix-id": msg_id, "svix-timestamp": stamp, "svix-signature": f"v1,{sig}"}


def resend_event(kind: str, email_id: str, to: str = "a@example.com", **data: Any) -> bytes:
    return json.dumps({"type": kind, "created_at": "2026-12-01T12:00:00.000Z",
                       "data": {"email_id": email_id, "to": [to], "created_at": "2026-12-01T12:00:00.000Z",
                                **data}}).encode()


def mailgun_body(token: str, event_id: str, *, key: str = MAILGUN_KEY) -> bytes:
    stamp = str(int(time.time()))
    sig = hmac.new(key.encode(), (stamp + token).encode(), hashlib.sha256).hexdigest()
    return json.dumps({"signature": {"timestamp": stamp, "token": token, "signature": sig},
                       "event-data": {"id": event_id, "event": "delivered", "timestamp": time.time(),
                                      "recipient": "a@example.com",
                                      "message": {"headers": {"message-id": "mg-1@example.com"}}}}).encode()


@pytest.fixture
async def receiver(db_url: str) -> AsyncIterator[tuple[str, EventStore]]:
    settings = Settings(database_url=db_url, webhooks={
        "resend": {"secret": RESEND_SECRET},
        "postmark": {"username": "pm", "password": "pm-pass"}, "mailgun": {"signing_key": MAILGUN_KEY}})
    store = await EventStore.open(db_url)
    async with httpx.AsyncClient() as http:
        app = build_app(Receiver(settings.webhooks, store, automatic_suppression=True, http=http))
        async with serve_http(app, f"127.0.0.1:{free_port()}", setting="test") as (host, port):
            yield f"http://{host}:{port}", store
    await store.close()


async def post(url: str, path: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    async with httpx.AsyncClient() as c:
        return await c.post(url + path, content=body, headers={"content-type": "application/json", **headers})


async def count(store: SqlStore, table: str) -> int:
    return int((await store.fetch(f"SELECT count(*) AS n FROM {table}"))[0]["n"])


async def test_a_signed_hard_bounce_marks_the_row_and_suppresses_once_even_when_retried(
        receiver: tuple[str, EventStore], db_url: str, store: SqlStore) -> None:
    url, _ = receiver
    row = await send_one(db_url, store, "order-", "re_123")
    body = resend_event("email.bounced", "re_123", bounce={"type": "Permanent", "message": "no such user"})
    r = await post(url, "/webhooks/resend", body, svix_headers(body, "msg_1"))
    assert r.status_code == 200 and r.json() == {"recorded": 1, "duplicates": 0, "unmatched": 0}
    [d] = await store.fetch("SELECT delivery_event FROM email_deliveries WHERE id = $1", row)
    assert d["delivery_event"] == "bounced"
    [s] = await store.fetch("SELECT address, reason, source, delivery_id FROM email_suppressions")
    assert dict(s) == {"address": "a@example.com", "reason": "hard_bounce", "source": "resend", "delivery_id": row}
    # Svix retries reuse svix-id: a new signature, the same event: 200, nothing written twice
    again = await post(url, "/webhooks/resend", body, svix_headers(body, "msg_1"))
    assert again.status_code == 200 and again.json()["duplicates"] == 1
    assert await count(store, "email_delivery_events") == 1


@pytest.mark.parametrize("case", ["wrong secret", "altered body", "no signature", "stale timestamp"])
async def test_a_forged_resend_request_gets_401_and_writes_nothing(
        receiver: tuple[str, EventStore], store: SqlStore, case: str) -> None:
    url, _ = receiver
    body = resend_event("email.delivered", "re_1")
    headers = svix_headers(body, "msg_f")
    if case == "wrong secret":
        headers = svix_headers(body, "msg_f", secret="whsec_" + base64.b64encode(b"x" * 24).decode())
    elif case == "altered body":
        body = body.replace(b"re_1", b"re_2")
    elif case == "no signature":
        del headers["svix-signature"]
    else:
        headers = svix_headers(body, "msg_f", at=time.time() - 6 * 60)
    r = await post(url, "/webhooks/resend", body, headers)
    assert r.status_code == 401
    assert await count(store, "email_delivery_events") == 0


async def test_malformed_unknown_oversized_and_unconfigured_get_their_answers(
        receiver: tuple[str, EventStore], store: SqlStore) -> None:
    url, _ = receiver
    assert (await post(url, "/webhooks/resend", b"{not json", svix_headers(b"{not json", "m1"))).status_code == 400
    opened = resend_event("email.opened", "re_1")
    r = await post(url, "/webhooks/resend", opened, svix_headers(opened, "m2"))
    assert r.status_code == 200 and r.json()["recorded"] == 0, "authentic but unknown: 200, so it is not retried"
    unmatched = resend_event("email.delivered", "re_nobody")
    r = await post(url, "/webhooks/resend", unmatched, svix_headers(unmatched, "m3"))
    assert r.status_code == 200 and r.json()["unmatched"] == 1
    big = b"x" * (5 * 1024 * 1024 + 1)
    assert (await post(url, "/webhooks/resend", big, svix_headers(big, "m4"))).status_code == 413
    assert (await post(url, "/webhooks/sendgrid", b"[]", {})).status_code == 404, "no public key set"
    assert (await post(url, "/webhooks/nobody", b"[]", {})).status_code == 404


async def test_postmark_needs_its_basic_credentials(receiver: tuple[str, EventStore]) -> None:
    url, _ = receiver
    body = json.dumps({"RecordType": "Delivery", "MessageID": "pm-1", "Recipient": "a@example.com",
                       "DeliveredAt": "2026-12-01T12:00:00Z"}).encode()
    good = "Basic " + base64.b64encode(b"pm:pm-pass").decode()
    bad = "Basic " + base64.b64encode(b"pm:wrong").decode()
    assert (await post(url, "/webhooks/postmark", body, {"authorization": bad})).status_code == 401
    assert (await post(url, "/webhooks/postmark", body, {})).status_code == 401
    assert (await post(url, "/webhooks/postmark", body, {"authorization": good})).status_code == 200


async def test_a_mailgun_token_reused_for_another_body_is_refused(receiver: tuple[str, EventStore],
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    url, _ = receiver
    first = mailgun_body("tok-1", "ev-1")
    assert (await post(url, "/webhooks/mailgun", first, {})).status_code == 200
    assert (await post(url, "/webhooks/mailgun", first, {})).status_code == 200, "the provider's own retry"
    other = mailgun_body("tok-1", "ev-2")
    r = await post(url, "/webhooks/mailgun", other, {})
    assert r.status_code == 401 and "replay" in caplog.text


async def test_the_receiver_answers_503_while_the_database_is_gone(receiver: tuple[str, EventStore]) -> None:
    url, store = receiver
    await store.close()  # the pool is gone, as when PostgreSQL cannot be reached
    body = resend_event("email.delivered", "re_1")
    r = await post(url, "/webhooks/resend", body, svix_headers(body, "m503"))
    assert r.status_code == 503 and r.headers["retry-after"]


async def test_an_sns_certificate_that_cannot_be_fetched_gets_503_so_sns_retries(
        db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    arn = "arn:aws:sns:eu-west-1:123456789012:ses-events"
    monkeypatch.setattr(ses, "SNS_CERT_HOST", re.compile(r"127\.0\.0\.1"))
    settings = Settings(database_url=db_url, webhooks={"ses": {"topic_arns": arn}})
    envelope = {"Type": "Notification", "MessageId": "m-1", "TopicArn": arn, "Message": "{}",
                "Timestamp": "2026-12-01T12:00:00.000Z", "SignatureVersion": "2", "Signature": "AAAA",
                "SigningCertURL": "https://127.0.0.1/SimpleNotificationService-nothing-here.pem"}
    store = await EventStore.open(db_url)
    try:
        async with httpx.AsyncClient() as http:  # nothing listens on 127.0.0.1:443
            app = build_app(Receiver(settings.webhooks, store, automatic_suppression=True, http=http))
            async with serve_http(app, f"127.0.0.1:{free_port()}", setting="test") as (host, port):
                r = await post(f"http://{host}:{port}", "/webhooks/ses", json.dumps(envelope).encode(), {})
        assert r.status_code == 503 and r.headers["retry-after"] == "30"
    finally:
        await store.close()


async def test_an_event_refused_with_503_during_a_postgresql_outage_is_recorded_once_on_the_retry() -> None:
    # PostgreSQL really down (not a closed pool): 503 while it is, then the provider's retry lands
    with TemporaryPostgres() as pg:
        owner = await SqlStore.open(pg.url)
        await owner.migrate(load_migrations())
        await owner.close()
        settings = Settings(database_url=pg.url, webhooks={"resend": {"secret": RESEND_SECRET}})
        store = await EventStore.open(pg.url)
        try:
            async with httpx.AsyncClient() as http:
                app = build_app(Receiver(settings.webhooks, store, automatic_suppression=True, http=http))
                async with serve_http(app, f"127.0.0.1:{free_port()}", setting="test") as (host, port):
                    url = f"http://{host}:{port}"
                    body = resend_event("email.delivered", "re_outage")
                    probe = resend_event("email.delivered", "re_probe")
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(anyio.to_thread.run_sync, pg.restart, 3.0)  # down 3 s, data kept
                        with anyio.fail_after(10):  # until PostgreSQL is seen down
                            while (await post(url, "/webhooks/resend", probe,
                                              svix_headers(probe, "m-probe"))).status_code != 503:
                                await anyio.sleep(0.05)
                        down = await post(url, "/webhooks/resend", body, svix_headers(body, "m-outage"))
                        assert down.status_code == 503 and down.headers["retry-after"]
                        with anyio.fail_after(30):  # the provider retries until it is taken
                            while (again := await post(url, "/webhooks/resend", body,
                                                       svix_headers(body, "m-outage"))).status_code == 503:
                                await anyio.sleep(0.2)
                    assert again.status_code == 200 and again.json()["unmatched"] == 1
                    retried = await post(url, "/webhooks/resend", body, svix_headers(body, "m-outage"))
                    assert retried.json()["duplicates"] == 1, "written once"
        finally:
            await store.close()
