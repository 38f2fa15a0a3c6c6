"""One trace from an application's span to a delivery event (docs/tracing.md): the client enqueues under the
current span (psycopg, real PostgreSQL), the in-process daemon sends through a real SMTP server with a span in
that trace, and the webhook receiver on loopback takes a signed SendGrid event with a span in it too. The spans
are kept by the SDK's in-memory exporter (the ``spans`` fixture, tests/otel_spans.py)."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import psycopg
import pytest

from outbox_mailer.client import Email, enqueue
from outbox_mailer.receiver.server import Receiver, build_app
from outbox_mailer.serving.http_server import serve_http
from outbox_mailer.settings.config import Settings
from outbox_mailer.store import EventStore
from tests.otel_spans import Spans, traceparent_of
from tests.smtp_server import free_port
from tests.unit import test_events_sendgrid as sg

pytestmark = pytest.mark.anyio


async def post_signed_event(db_url: str, event: dict[str, Any]) -> httpx.Response:
    """A SendGrid event, signed with the key the receiver trusts, posted to a receiver on loopback."""
    settings = Settings(database_url=db_url, webhooks={"sendgrid": {"public_key": sg.PUBLIC}})
    store = await EventStore.open(db_url)
    body = json.dumps([event]).encode()
    try:
        async with httpx.AsyncClient() as http:
            app = build_app(Receiver(settings.webhooks, store, automatic_suppression=True, http=http))
            async with serve_http(app, f"127.0.0.1:{free_port()}", setting="test") as (host, port):
                return await http.post(f"http://{host}:{port}/webhooks/sendgrid", content=body, headers={
                    "content-type": "application/json", **sg.signed(body, str(int(time.time())))})
    finally:
        await store.close()


async def test_one_trace_runs_from_the_applications_span_through_the_send_to_a_signed_delivery_event(
        spans: Spans, running: Any, db_url: str) -> None:
    daemon = await running()
    from opentelemetry import trace

    with trace.get_tracer("shop").start_as_current_span("checkout") as checkout, psycopg.connect(db_url) as conn:
        assert enqueue(conn, Email(dedupe_key="order-7", to=["ann@example.com"], subject="Thanks", text="Hi"))
    application = traceparent_of(spans.named("checkout")[0])
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT traceparent FROM email_deliveries").fetchall() == [(application,)]
    assert (await daemon.final("order-7"))["order-7"]["status"] == "sent"
    answer = await post_signed_event(db_url, sg.event("delivered", email="ann@example.com", dedupe_key="order-7",
                                                      sg_event_id="sg-delivered-7"))
    assert answer.json() == {"recorded": 1, "duplicates": 0, "unmatched": 0}

    [send] = spans.named("send smtp")
    [process] = spans.named("process sendgrid")
    trace_id = checkout.get_span_context().trace_id
    for span in (send, process):
        assert span.context is not None and span.context.trace_id == trace_id, span.name
        assert span.parent is not None and span.parent.span_id == checkout.get_span_context().span_id, span.name
    assert (send.attributes or {})["outbox_mailer.outcome"] == "sent"
    assert (send.attributes or {})["messaging.destination.name"] == "smtp"
    assert process.kind.name == "CONSUMER"
    assert {k: v for k, v in (process.attributes or {}).items() if k != "messaging.message.id"} == {
        "messaging.system": "sendgrid", "messaging.operation.type": "process", "messaging.operation.name": "process",
        "outbox_mailer.dedupe_key": "order-7", "outbox_mailer.event": "delivered"}


async def test_an_explicit_traceparent_wins_over_the_current_span(spans: Spans, db_url: str) -> None:
    from opentelemetry import trace

    given = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    with trace.get_tracer("shop").start_as_current_span("checkout"), psycopg.connect(db_url) as conn:
        enqueue(conn, Email(dedupe_key="given", to=["ann@example.com"], subject="s", text="t", traceparent=given))
        enqueue(conn, Email(dedupe_key="current", to=["ann@example.com"], subject="s", text="t"))
    with psycopg.connect(db_url) as conn:
        rows = dict(conn.execute("SELECT dedupe_key, traceparent FROM email_deliveries").fetchall())
    assert rows == {"given": given, "current": traceparent_of(spans.named("checkout")[0])}
