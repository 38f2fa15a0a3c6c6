"""The webhook receiver on loopback (Starlette on uvicorn, real PostgreSQL) with its two public-key schemes on:
SendGrid's Signed Event Webhook (ECDSA P-256 over timestamp + body) and SES through SNS (RSA signatures,
versions 1 and 2, checked with the certificate at SigningCertURL, fetched over real TLS from a loopback HTTPS
server, and a SubscriptionConfirmation answered by GETting its SubscribeURL there).

SigningCertURL can carry no port: ``ses._CERT_URL`` refuses one, as it should, since SNS serves its
certificates on 443. The test HTTPS server listens on a free port instead, so the receiver's HTTP client
(otherwise httpx's own, with TLS verified against the test certificate) sends https requests to a loopback
host on the default port to that port. A SubscribeURL may carry a port and is fetched as it is. No setting
lets a certificate come from anywhere but SNS: the tests replace ``ses.SNS_CERT_HOST`` to allow 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import re
import ssl
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from outbox_mailer.clock import utc_now
from outbox_mailer.delivery_events import ses
from outbox_mailer.receiver.server import CERTIFICATE_RETRY_SECONDS, Receiver, build_app
from outbox_mailer.serving.http_server import serve_http
from outbox_mailer.settings.config import Settings
from outbox_mailer.store import EventStore
from tests.integration.test_delivery_events import send_one
from tests.integration.test_webhook_receiver import count, post
from tests.smtp_server import free_port, make_self_signed_cert
from tests.sql_store import SqlStore
from tests.unit import test_events_sendgrid as sg
from tests.unit import test_events_ses as sns

pytestmark = pytest.mark.anyio

CERT_PATH = "/SimpleNotificationService-loopback.pem"
CERT_URL = "https://127.0.0.1" + CERT_PATH  # no port (see the module docstring)
CERT_HOSTS = r"127\.0\.0\.1"  # ses.SNS_CERT_HOST in these tests: localhost, which serves the same, is not allowed
OTHER_TOPIC = "arn:aws:sns:eu-west-1:999999999999:ses-events"
SNS_HEADERS = {"content-type": "text/plain; charset=UTF-8"}


# ---- the loopback HTTPS server and the receiver's client ---------------------------------------------------

class LoopbackHttps:
    """A TLS server on 127.0.0.1 in a thread: the SNS signing certificate at CERT_PATH, 200 for a
    ConfirmSubscription GET, 404 otherwise. ``requests`` holds the path (with query) of every GET, in order."""

    def __init__(self, certificate: tuple[Path, Path]) -> None:
        self.requests: list[str] = []
        requests = self.requests

        class Handler(BaseHTTPRequestHandler):
            timeout = 5  # seconds, for the handshake and the request

            def do_GET(self) -> None:
                requests.append(self.path)
                if self.path == CERT_PATH:
                    status, body = 200, sns.PEM
                elif parse_qs(urlsplit(self.path).query).get("Action") == ["ConfirmSubscription"]:
                    status, body = 200, b"<ConfirmSubscriptionResponse/>"
                else:
                    status, body = 404, b"not here\n"
                self.send_response(status)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(*certificate)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # the handshake happens in the handler's thread, under its timeout, not in accept()
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True, do_handshake_on_connect=False)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


class DefaultHttpsPortTo(httpx.AsyncBaseTransport):
    """httpx's own transport (TLS verified with ``verify``), except that https to 127.0.0.1 or localhost on
    the default port goes to ``port``."""

    def __init__(self, port: int, verify: ssl.SSLContext) -> None:
        self.port = port
        self.inner = httpx.AsyncHTTPTransport(verify=verify)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme == "https" and url.port is None and url.host in ("127.0.0.1", "localhost"):
            request.url = url.copy_with(port=self.port)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.fixture(scope="module")
def tls_certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_self_signed_cert(tmp_path_factory.mktemp("https"))


@pytest.fixture
def https(tls_certificate: tuple[Path, Path]) -> Iterator[LoopbackHttps]:
    server = LoopbackHttps(tls_certificate)
    yield server
    server.close()


@contextlib.asynccontextmanager
async def serving(db_url: str, settings: Settings, https: LoopbackHttps, tls_certificate: tuple[Path, Path],
                  clock: Callable[[], datetime] = utc_now) -> AsyncIterator[str]:
    """The receiver with ``settings`` on a free loopback port, its client sending https to ``https``."""
    store = await EventStore.open(db_url)
    trust = ssl.create_default_context(cafile=str(tls_certificate[0]))
    try:
        async with httpx.AsyncClient(transport=DefaultHttpsPortTo(https.port, trust)) as http:
            app = build_app(Receiver(settings.webhooks, store, automatic_suppression=True, http=http, clock=clock))
            async with serve_http(app, f"127.0.0.1:{free_port()}", setting="test") as (host, port):
                yield f"http://{host}:{port}"
    finally:
        await store.close()


def receiver_settings(db_url: str) -> Settings:
    return Settings(database_url=db_url, webhooks={"sendgrid": {"public_key": sg.PUBLIC},
                                                   "ses": {"topic_arns": sns.TOPIC}})


@pytest.fixture
async def receiver(db_url: str, https: LoopbackHttps, tls_certificate: tuple[Path, Path],
                   monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    monkeypatch.setattr(ses, "SNS_CERT_HOST", re.compile(CERT_HOSTS))
    async with serving(db_url, receiver_settings(db_url), https, tls_certificate) as url:
        yield url


async def events(store: SqlStore) -> list[dict[str, Any]]:
    return [dict(r) for r in await store.fetch(
        "SELECT delivery_id, provider, provider_event_id, kind, bounce_class, recipient FROM email_delivery_events "
        "ORDER BY id")]


async def delivery_event(store: SqlStore, delivery_id: int) -> str | None:
    [r] = await store.fetch("SELECT delivery_event FROM email_deliveries WHERE id = $1", delivery_id)
    return r["delivery_event"]


async def suppressions(store: SqlStore) -> dict[str, tuple[str, str, int | None]]:
    rows = await store.fetch("SELECT address, reason, source, delivery_id FROM email_suppressions")
    return {r["address"]: (r["reason"], r["source"], r["delivery_id"]) for r in rows}


# ---- SendGrid ----------------------------------------------------------------------------------------------

def sendgrid_body(dedupe_key: str) -> bytes:
    """A batch as SendGrid posts it: an unmapped event, then a hard bounce that only its custom_args
    dedupe_key can match (sg_message_id and smtp-id are none of ours)."""
    return json.dumps([
        sg.event("processed", email="zoe@example.com", dedupe_key=dedupe_key),
        sg.event("bounce", type="bounce", email="a@example.com", sg_event_id="sg-bounce-1", dedupe_key=dedupe_key,
                 sg_message_id="NotOurs.filterdrecv-5645d9c87f-6r2ch-1-5F5FC76C-1.0", status="5.1.1",
                 reason="550 5.1.1 The email account that you tried to reach does not exist"),
    ]).encode() + b"\r\n"


def sendgrid_headers(body: bytes, *, at: float | None = None,
                     key: ec.EllipticCurvePrivateKey = sg.PRIVATE) -> dict[str, str]:
    return sg.signed(body, str(int(at if at is not None else time.time())), key)


async def test_a_signed_sendgrid_bounce_marks_its_row_found_by_dedupe_key_and_suppresses_once(
        receiver: str, db_url: str, store: SqlStore) -> None:
    row = await send_one(db_url, store, "sg-order-", "sg-x-message-id")
    body = sendgrid_body("sg-order-1")
    r = await post(receiver, "/webhooks/sendgrid", body, sendgrid_headers(body))
    assert r.status_code == 200 and r.json() == {"recorded": 1, "duplicates": 0, "unmatched": 0}
    assert await events(store) == [{"delivery_id": row, "provider": "sendgrid", "provider_event_id": "sg-bounce-1",
                                    "kind": "bounced", "bounce_class": "hard", "recipient": "a@example.com"}]
    assert await delivery_event(store, row) == "bounced"
    assert await suppressions(store) == {"a@example.com": ("hard_bounce", "sendgrid", row)}
    # SendGrid's retry: the same body signed again (ECDSA signatures differ each time): 200, nothing written twice
    again = sendgrid_headers(body)
    assert again != sendgrid_headers(body)
    r = await post(receiver, "/webhooks/sendgrid", body, again)
    assert r.status_code == 200 and r.json() == {"recorded": 0, "duplicates": 1, "unmatched": 0}
    assert await count(store, "email_delivery_events") == 1 and await count(store, "email_suppressions") == 1


@pytest.mark.parametrize(("case", "reason"), [("one byte changed in the body", "signature does not match"),
                                              ("signed by another key", "signature does not match"),
                                              ("timestamp 6 minutes old", "more than 300 s from now")])
async def test_a_forged_sendgrid_request_gets_401_and_writes_nothing(
        receiver: str, db_url: str, store: SqlStore, case: str, reason: str, caplog: pytest.LogCaptureFixture) -> None:
    row = await send_one(db_url, store, "sg-order-", "sg-x-message-id")
    genuine = sendgrid_body("sg-order-1")
    body, headers = genuine, sendgrid_headers(genuine)
    if case == "one byte changed in the body":
        body = genuine.replace(b'"a@example.com"', b'"b@example.com"')  # the bounced address: a -> b
        assert len(body) == len(genuine) and sum(x != y for x, y in zip(body, genuine, strict=True)) == 1
    elif case == "signed by another key":
        headers = sendgrid_headers(body, key=sg.OTHER)
    else:
        headers = sendgrid_headers(body, at=time.time() - 6 * 60)
    r = await post(receiver, "/webhooks/sendgrid", body, headers)
    assert r.status_code == 401 and reason in caplog.text
    assert await count(store, "email_delivery_events") == 0 and await count(store, "email_suppressions") == 0
    assert await delivery_event(store, row) is None
    # the forgery was well formed and about our row: signed properly, the same request is recorded
    r = await post(receiver, "/webhooks/sendgrid", genuine, sendgrid_headers(genuine))
    assert r.status_code == 200 and r.json()["recorded"] == 1


# ---- SES through SNS ---------------------------------------------------------------------------------------

def ses_bounce(recipient: str, message_id: str, sns_message_id: str) -> dict[str, Any]:
    """An SNS Notification of an SES Permanent bounce of the email with our ``message_id`` header; its SES
    messageId is one we never recorded, so only the Message-ID can match it to a row."""
    bounce = {"bounceType": "Permanent", "bounceSubType": "General", "timestamp": "2026-12-01T12:00:05.000Z",
              "feedbackId": f"0102019-{sns_message_id}", "reportingMTA": "dns; a8-70.smtp-out.amazonses.com",
              "bouncedRecipients": [{"emailAddress": recipient, "action": "failed", "status": "5.1.1",
                                     "diagnosticCode": "smtp; 550 5.1.1 user unknown"}]}
    message = sns.ses_event(
        "Bounce", bounce, messageId=f"0102019-ses-id-not-recorded-{sns_message_id}", destination=[recipient],
        headers=[{"name": "Message-ID", "value": message_id}],
        commonHeaders={"from": ["app@example.com"], "to": [recipient], "messageId": message_id, "subject": "hi"})
    return sns.notification(message, MessageId=sns_message_id)


def signed_sns(envelope: dict[str, Any], version: str = "2", *, cert_url: str = CERT_URL,
               key: rsa.RSAPrivateKey = sns.KEY) -> dict[str, Any]:
    return sns.sign(envelope, version, key) | {"SigningCertURL": cert_url}


async def post_sns(receiver: str, envelope: dict[str, Any]) -> httpx.Response:
    return await post(receiver, "/webhooks/ses", json.dumps(envelope).encode(),
                      SNS_HEADERS | {"x-amz-sns-message-type": envelope["Type"]})


async def test_ses_bounces_signed_with_either_version_mark_their_rows_by_message_id_and_fetch_the_cert_once(
        receiver: str, https: LoopbackHttps, db_url: str, store: SqlStore) -> None:
    a = await send_one(db_url, store, "ses-a", "ses-provider-a")
    b = await send_one(db_url, store, "ses-b", "ses-provider-b")
    await store.execute("UPDATE email_deliveries SET to_addresses = ARRAY['b@example.com'] WHERE id = $1", b)
    [ma, mb] = [r["message_id"] for r in await store.fetch(
        "SELECT message_id FROM email_deliveries WHERE id = ANY($1::bigint[]) ORDER BY id", [a, b])]
    v1 = signed_sns(ses_bounce("a@example.com", ma, "sns-1"), "1")
    v2 = signed_sns(ses_bounce("b@example.com", mb, "sns-2"), "2")
    for envelope in (v1, v2):
        r = await post_sns(receiver, envelope)
        assert r.status_code == 200 and r.json() == {"recorded": 1, "duplicates": 0, "unmatched": 0}, r.text
    assert await events(store) == [
        {"delivery_id": a, "provider": "ses", "provider_event_id": "sns-1:a@example.com", "kind": "bounced",
         "bounce_class": "hard", "recipient": "a@example.com"},
        {"delivery_id": b, "provider": "ses", "provider_event_id": "sns-2:b@example.com", "kind": "bounced",
         "bounce_class": "hard", "recipient": "b@example.com"}]
    assert (await delivery_event(store, a), await delivery_event(store, b)) == ("bounced", "bounced")
    assert await suppressions(store) == {"a@example.com": ("hard_bounce", "ses", a),
                                         "b@example.com": ("hard_bounce", "ses", b)}
    # SNS retries keep MessageId: 200, nothing written twice, and the certificate still comes from the cache
    r = await post_sns(receiver, v1)
    assert r.status_code == 200 and r.json() == {"recorded": 0, "duplicates": 1, "unmatched": 0}
    assert await count(store, "email_delivery_events") == 2 and await count(store, "email_suppressions") == 2
    assert https.requests == [CERT_PATH], "one fetch of the signing certificate for every notification"


@pytest.mark.parametrize(("case", "reason", "fetched"), [
    ("another TopicArn", "TopicArn", []),
    ("SigningCertURL on a host not allowed", "SigningCertURL", []),
    ("tampered Message", "Signature does not match", [CERT_PATH]),
])
async def test_a_forged_sns_notification_gets_401_and_writes_nothing(
        receiver: str, https: LoopbackHttps, db_url: str, store: SqlStore, case: str, reason: str,
        fetched: list[str], caplog: pytest.LogCaptureFixture) -> None:
    row = await send_one(db_url, store, "ses-a", "ses-provider-a")
    envelope = ses_bounce("a@example.com", "<ses-a@example.com>", "sns-f")
    if case == "another TopicArn":
        forged = signed_sns(envelope | {"TopicArn": OTHER_TOPIC})
    elif case == "SigningCertURL on a host not allowed":
        forged = signed_sns(envelope, cert_url="https://localhost" + CERT_PATH)  # it would serve the same PEM
    else:  # the bounce moved onto someone else's address, to have it suppressed
        forged = signed_sns(envelope)
        forged["Message"] = forged["Message"].replace("a@example.com", "victim@example.com")
        assert json.loads(forged["Message"])["bounce"]["bouncedRecipients"][0]["emailAddress"] == "victim@example.com"
    r = await post_sns(receiver, forged)
    assert r.status_code == 401 and reason in caplog.text
    assert https.requests == fetched
    assert await count(store, "email_delivery_events") == 0 and await count(store, "email_suppressions") == 0
    assert await delivery_event(store, row) is None
    # the forgery was well formed and about our row: signed properly, it is recorded
    r = await post_sns(receiver, signed_sns(envelope))
    assert r.status_code == 200 and r.json()["recorded"] == 1
    assert https.requests == [CERT_PATH]


async def test_a_subscription_confirmation_is_answered_by_getting_its_subscribe_url(
        receiver: str, https: LoopbackHttps, store: SqlStore, caplog: pytest.LogCaptureFixture) -> None:
    token = "2336412f37fb687f5d51e6e2425c464de12884a3b1f0b1c2"
    subscribe = (f"https://127.0.0.1:{https.port}/?Action=ConfirmSubscription&TopicArn={sns.TOPIC}"
                 f"&Token={token}")
    envelope = signed_sns(sns.confirmation() | {"SubscribeURL": subscribe, "Token": token}, "1")
    # SubscribeURL is signed: one pointing elsewhere after signing is refused, and nothing is fetched from it
    forged = envelope | {"SubscribeURL": subscribe.replace(token, "forged")}
    r = await post_sns(receiver, forged)
    assert r.status_code == 401 and "Signature does not match" in caplog.text
    assert https.requests == [CERT_PATH]
    r = await post_sns(receiver, envelope)
    assert r.status_code == 200 and r.json() == {"recorded": 0, "duplicates": 0, "unmatched": 0}
    assert len(https.requests) == 2, https.requests
    confirmed = urlsplit(https.requests[1])
    assert confirmed.path == "/" and parse_qs(confirmed.query) == {
        "Action": ["ConfirmSubscription"], "TopicArn": [sns.TOPIC], "Token": [token]}
    assert await count(store, "email_delivery_events") == 0


# ---- what an unauthenticated caller can learn, and make the receiver do -----------------------------------

async def test_a_wrong_topic_is_answered_as_a_wrong_signature_is(receiver: str, https: LoopbackHttps) -> None:
    envelope = ses_bounce("a@example.com", "<ses-a@example.com>", "sns-probe")
    other_topic = await post_sns(receiver, signed_sns(envelope | {"TopicArn": OTHER_TOPIC}))
    forged = signed_sns(envelope)
    forged["Message"] = forged["Message"].replace("a@example.com", "b@example.com")
    bad_signature = await post_sns(receiver, forged)
    assert (other_topic.status_code, other_topic.text) == (bad_signature.status_code, bad_signature.text)
    assert other_topic.status_code == 401 and OTHER_TOPIC not in other_topic.text and sns.TOPIC not in other_topic.text


async def test_no_setting_lets_a_certificate_come_from_a_host_other_than_sns(
        db_url: str, https: LoopbackHttps, tls_certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
        store: SqlStore) -> None:
    monkeypatch.setenv("OUTBOX_MAILER_WEBHOOKS__SES__CERTIFICATE_HOST_PATTERN", CERT_HOSTS)
    monkeypatch.setenv("OUTBOX_MAILER_WEBHOOKS__SES__TOPIC_ARNS", sns.TOPIC)
    settings = Settings(database_url=db_url)
    assert settings.webhooks.ses.arns() == {sns.TOPIC}
    async with serving(db_url, settings, https, tls_certificate) as url:
        r = await post_sns(url, signed_sns(ses_bounce("a@example.com", "<ses-a@example.com>", "sns-env")))
    assert r.status_code == 401 and https.requests == []
    assert await count(store, "email_delivery_events") == 0


async def test_a_certificate_that_could_not_be_fetched_is_not_fetched_again_for_a_while(
        db_url: str, https: LoopbackHttps, tls_certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ses, "SNS_CERT_HOST", re.compile(CERT_HOSTS))
    now = [utc_now()]
    missing = "https://127.0.0.1/SimpleNotificationService-missing.pem"  # the loopback server answers 404
    envelope = signed_sns(ses_bounce("a@example.com", "<ses-a@example.com>", "sns-missing"), cert_url=missing)
    async with serving(db_url, receiver_settings(db_url), https, tls_certificate, clock=lambda: now[0]) as url:
        answers = [(await post_sns(url, envelope)).status_code for _ in range(3)]
        assert answers == [503, 503, 503] and https.requests == ["/SimpleNotificationService-missing.pem"]
        now[0] += timedelta(seconds=CERTIFICATE_RETRY_SECONDS + 1)
        assert (await post_sns(url, envelope)).status_code == 503
        assert len(https.requests) == 2, "fetched again once the failure is old enough"
