"""The whole loop through Resend: a row sent through the fake Resend API, its bounce posted to the
receiver signed as Resend signs it, and the next row to that address failed without the fake
provider seeing a request."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from outbox_mailer.receiver.server import Receiver, build_app
from outbox_mailer.serving.http_server import serve_http
from outbox_mailer.settings.config import Settings
from outbox_mailer.store import EventStore
from tests.integration.test_daemon_batches import insert, settled
from tests.integration.test_webhook_receiver import RESEND_SECRET, resend_event, svix_headers
from tests.provider_server import ProviderServer
from tests.smtp_server import free_port
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio


async def test_a_row_bounced_through_resend_suppresses_its_address_and_the_next_row_is_not_sent(
        db_url: str, store: SqlStore, resend: Any) -> None:
    server = ProviderServer().start()
    events = await EventStore.open(db_url)
    try:
        [key] = await insert(store, 1, prefix="first-")
        await resend(server, batch=False)
        assert (await settled(store, 1))[key] == "sent"
        [row] = await store.fetch("SELECT provider_message_id FROM email_deliveries WHERE dedupe_key = $1", key)
        settings = Settings(database_url=db_url, webhooks={"resend": {"secret": RESEND_SECRET}})
        async with httpx.AsyncClient() as http:
            app = build_app(Receiver(settings.webhooks, events, automatic_suppression=True, http=http))
            async with serve_http(app, f"127.0.0.1:{free_port()}", setting="test") as (host, port):
                body = resend_event("email.bounced", row["provider_message_id"], to=f"{key}@example.com",
                                    bounce={"type": "Permanent", "subType": "General"})
                reply = await http.post(f"http://{host}:{port}/webhooks/resend", content=body,
                                        headers=svix_headers(body, "msg_bounce"))
        assert reply.status_code == 200 and reply.json()["unmatched"] == 0
        requests_before = len(server.sends())
        await store.execute("INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body) "
                            "VALUES ('second', ARRAY[$1], 'again', 'body')", f"{key.upper()}@EXAMPLE.COM")
        statuses = await settled(store, 2)
        assert statuses["second"] == "failed"
        [second] = await store.fetch("SELECT last_error FROM email_deliveries WHERE dedupe_key = 'second'")
        assert second["last_error"].startswith(f"suppressed: {key}@example.com (hard_bounce since ")
        assert len(server.sends()) == requests_before, "the fake provider saw no request for it"
        # a row with others: the suppressed Cc is not in the provider's request at all
        await store.execute("INSERT INTO email_deliveries (dedupe_key, to_addresses, cc_addresses, subject, text_body)"
                            " VALUES ('third', ARRAY['other@example.com'], ARRAY[$1, 'cc@example.com'], 's', 'b')",
                            f"{key}@example.com")
        assert (await settled(store, 3))["third"] == "sent"
        [request] = server.sends()[requests_before:]
        sent = request.json()
        assert (sent["to"], sent.get("cc")) == (["other@example.com"], ["cc@example.com"])
    finally:
        await events.close()
        server.stop()
