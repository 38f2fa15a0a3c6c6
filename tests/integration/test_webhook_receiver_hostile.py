"""The webhook receiver on loopback (real PostgreSQL) against hostile callers: one address holding every
connection, request heads over the limit, signed bodies with characters PostgreSQL refuses, timestamps no
clock can hold, and refusals that must tell an unauthenticated caller nothing about the server.

Loopback has a whole /8 of addresses: each client binds its own source address (127.0.0.x), so the
per-client limit is seen as it is on the internet. The receiver's proxies are set to one of them, since
loopback is exempt by default.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from anyio.abc import SocketStream

from outbox_mailer.receiver.server import Receiver, build_app
from outbox_mailer.serving.http_server import (
    MAX_CONNECTIONS,
    MAX_CONNECTIONS_PER_CLIENT,
    MAX_HEAD_BYTES,
    REQUEST_TIMEOUT_SECONDS,
    serve_http,
)
from outbox_mailer.settings.config import Settings
from outbox_mailer.store import EventStore
from tests.integration.test_webhook_receiver import MAILGUN_KEY, RESEND_SECRET, mailgun_body, resend_event, svix_headers
from tests.smtp_server import free_port
from tests.sql_store import SqlStore
from tests.unit import test_events_sendgrid as sg

pytestmark = pytest.mark.anyio

ATTACKER, CLIENT, PROXY = "127.0.0.1", "127.0.0.2", "127.0.0.3"
BOUND = REQUEST_TIMEOUT_SECONDS * 4  # a safety bound on every wait, never what a test measures


class Served:
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port

    async def connect(self, source: str) -> SocketStream:
        return await anyio.connect_tcp(self.host, self.port, local_host=source)

    async def post(self, path: str, body: bytes, headers: dict[str, str], *, source: str = CLIENT) -> httpx.Response:
        transport = httpx.AsyncHTTPTransport(local_address=source)
        async with httpx.AsyncClient(transport=transport, timeout=BOUND) as client:
            return await client.post(f"http://{self.host}:{self.port}{path}", content=body,
                                     headers={"content-type": "application/json", **headers})


@pytest.fixture
async def served(db_url: str) -> AsyncIterator[Served]:
    settings = Settings(database_url=db_url, webhooks={
        "proxies": PROXY, "resend": {"secret": RESEND_SECRET}, "sendgrid": {"public_key": sg.PUBLIC},
        "mailgun": {"signing_key": MAILGUN_KEY}})
    store = await EventStore.open(db_url)
    async with httpx.AsyncClient() as http:
        app = build_app(Receiver(settings.webhooks, store, automatic_suppression=True, http=http))
        async with serve_http(app, f"127.0.0.1:{free_port()}", setting="test",
                              exempt=settings.webhooks.proxy_networks()) as (host, port):
            yield Served(host, port)
    await store.close()


async def answer(stream: SocketStream) -> bytes:
    """Everything the server sends until it closes the connection (b"" when it sent nothing)."""
    received = b""
    with anyio.fail_after(BOUND):
        try:
            while True:
                received += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            return received


# ---- connections -------------------------------------------------------------------------------------------

async def test_one_address_holding_every_connection_shuts_out_no_other_client(served: Served) -> None:
    idle = [await served.connect(ATTACKER) for _ in range(MAX_CONNECTIONS)]
    try:
        body = resend_event("email.delivered", "re_cap")
        r = await served.post("/webhooks/resend", body, svix_headers(body, "m-cap"), source=CLIENT)
        assert r.status_code == 200 and r.json()["unmatched"] == 1
        # beyond its own share the attacker's connections were closed unanswered; its first ones were kept
        assert await answer(idle[MAX_CONNECTIONS_PER_CLIENT]) == b""
        assert (await answer(idle[0])).startswith(b"HTTP/1.1 408 ")
    finally:
        for stream in idle:
            await stream.aclose()


async def test_the_configured_proxy_may_hold_more_connections_than_one_client(served: Served) -> None:
    held = [await served.connect(PROXY) for _ in range(MAX_CONNECTIONS_PER_CLIENT + 4)]
    try:
        await held[-1].send(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert (await answer(held[-1])).startswith(b"HTTP/1.1 200 ")
    finally:
        for stream in held:
            await stream.aclose()


# ---- request heads -----------------------------------------------------------------------------------------

def request_head(size: int) -> bytes:
    """A GET of /healthz whose request line and headers take exactly ``size`` bytes."""
    start, end = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n", b"\r\n"
    pad = size - len(start) - len(end) - len(b"X-Pad: \r\n")
    return start + b"X-Pad: " + b"p" * pad + b"\r\n" + end


@pytest.mark.parametrize(("size", "status"), [(MAX_HEAD_BYTES, b"200"), (MAX_HEAD_BYTES + 1, b"400"),
                                              (70 * 1000, b"400")])
async def test_a_request_head_over_the_limit_is_refused_however_it_arrives(
        served: Served, size: int, status: bytes) -> None:
    head = request_head(size)
    assert len(head) == size
    async with await served.connect(CLIENT) as stream:
        await stream.send(head)  # in one piece: the server reads it in one or a few large chunks
        assert (await answer(stream)).startswith(b"HTTP/1.1 " + status + b" ")


# ---- bodies PostgreSQL could not store ---------------------------------------------------------------------

async def test_a_signed_batch_with_nul_and_lone_surrogates_is_recorded_without_them(
        served: Served, store: SqlStore) -> None:
    batch = [sg.event("delivered", email="a@example.com", sg_event_id="sg-1"),
             sg.event("delivered", email="b\u0000@example.com", sg_event_id="sg-\u00002",
                      response="250 ok\u0000 \ud800 queued", **{"nul\u0000key": "v"}),
             sg.event("delivered", email="c@example.com", sg_event_id="sg-3")]
    body = json.dumps(batch).encode()
    assert b"\\u0000" in body and b"\\ud800" in body
    r = await served.post("/webhooks/sendgrid", body, sg.signed(body, str(int(time.time()))))
    assert r.status_code == 200 and r.json() == {"recorded": 3, "duplicates": 0, "unmatched": 3}
    rows = await store.fetch("SELECT provider_event_id, recipient, detail FROM email_delivery_events ORDER BY id")
    assert [(r["provider_event_id"], r["recipient"]) for r in rows] == [
        ("sg-1", "a@example.com"), ("sg-2", "b@example.com"), ("sg-3", "c@example.com")]
    detail: dict[str, Any] = rows[1]["detail"]
    assert detail["response"] == "250 ok \ufffd queued" and detail["nulkey"] == "v"


# ---- timestamps and what a refusal says ----------------------------------------------------------------------

async def test_timestamps_of_hundreds_of_digits_are_refused_as_unauthenticated(served: Served) -> None:
    body = json.dumps([sg.event("delivered")]).encode()
    huge = "9" * 400
    r = await served.post("/webhooks/sendgrid", body, sg.signed(body, huge))
    assert r.status_code == 401
    mailgun = json.loads(mailgun_body("tok-huge", "ev-huge"))
    mailgun["signature"]["timestamp"] = huge
    r = await served.post("/webhooks/mailgun", json.dumps(mailgun).encode(), {})
    assert r.status_code == 401


async def test_a_refusal_says_the_same_whatever_the_server_clock(served: Served) -> None:
    body = resend_event("email.delivered", "re_clock")
    answers = set()
    for stale in (1_000_000_000, 1_500_000_000):  # the age of each would give the server's time away
        r = await served.post("/webhooks/resend", body, svix_headers(body, "m-clock", at=stale))
        answers.add((r.status_code, r.text))
    assert len(answers) == 1 and answers.pop()[0] == 401
