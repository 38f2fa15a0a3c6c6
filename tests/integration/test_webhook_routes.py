"""The receiver serves one route per provider of the webhook registry (delivery_events/webhooks.py), and no other
webhook route (besides them: one-click unsubscribe, health and metrics): on loopback, against a real PostgreSQL,
with every provider's credentials set."""

from __future__ import annotations

import base64
import secrets

import httpx
import pytest
from starlette.routing import Route

from outbox_mailer.delivery_events.webhooks import WEBHOOK_PROVIDERS
from outbox_mailer.receiver.server import Receiver, build_app
from outbox_mailer.serving.http_server import serve_http
from outbox_mailer.settings.config import Settings
from outbox_mailer.store import EventStore
from tests.smtp_server import free_port
from tests.unit import test_events_sendgrid as sg

pytestmark = pytest.mark.anyio

EVERY_PROVIDER = {
    "resend": {"secret": "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()},
    "postmark": {"username": "pm", "password": "pm-pass"},
    "sendgrid": {"public_key": sg.PUBLIC},
    "ses": {"topic_arns": "arn:aws:sns:eu-west-1:123456789012:events"},
    "mailgun": {"signing_key": "key-" + secrets.token_hex(16)},
}


async def test_the_webhook_routes_served_are_exactly_the_registrys(db_url: str) -> None:
    settings = Settings(database_url=db_url, webhooks=EVERY_PROVIDER)
    assert settings.webhooks.enabled() == list(WEBHOOK_PROVIDERS)
    store = await EventStore.open(db_url)
    try:
        async with httpx.AsyncClient() as http:
            app = build_app(Receiver(settings.webhooks, store, automatic_suppression=True, http=http))
            served = [r.path for r in app.routes if isinstance(r, Route) and r.path.startswith("/webhooks/")]
            assert served == [f"/webhooks/{name}" for name in WEBHOOK_PROVIDERS]
            others = [r.path for r in app.routes if isinstance(r, Route) and not r.path.startswith("/webhooks/")]
            assert others == ["/unsubscribe/{token}", "/healthz", "/metrics"], "and besides them, only these"
            async with serve_http(app, f"127.0.0.1:{free_port()}", setting="test") as (host, port):
                for name in WEBHOOK_PROVIDERS:  # each scheme answers: an unsigned request is not authenticated
                    reply = await http.post(f"http://{host}:{port}/webhooks/{name}", content=b"{}")
                    assert reply.status_code == 401, name
                reply = await http.post(f"http://{host}:{port}/webhooks/sparkpost", content=b"{}")
                assert reply.status_code == 404
    finally:
        await store.close()
