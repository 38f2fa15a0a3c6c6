"""kill -9 during a batch request: the rescue resends the identical batch under the same key.

The installed daemon sends a batch of rows through the Resend transport; the fake provider
holds the request (it accepts the emails when the hold ends), and the daemon is killed
with SIGKILL while the request is open. A second daemon rescues the claims: it finds the
batch recorded before the request, resends the same members in the same order under the
same Idempotency-Key, the provider answers with the first request's result, and every
email is delivered exactly once. No member goes singly under its own key.
"""

from __future__ import annotations

import time

from tests.e2e.chaos import Fleet, insert_rows, resend_env, sql, status_counts, wait_until
from tests.provider_server import ProviderServer

ROWS = 60


def test_kill9_during_a_batch_request_is_rescued_as_the_same_batch_under_the_same_key(
        db_url: str, fleet: Fleet) -> None:
    fleet.deadline(120)
    server = ProviderServer().start()
    server.add_fault("slow", delay=3.0, count=1, paths=("/emails/batch",))
    try:
        keys = insert_rows(db_url, ROWS, prefix="kb-")
        env = resend_env(
            db_url, server.base_url,
            OUTBOX_MAILER_TRANSPORTS__RESEND__RATE_PER_SECOND="100",
            OUTBOX_MAILER_TRANSPORTS__RESEND__TIMEOUT_SECONDS="10",
            OUTBOX_MAILER_SMTP__TLS="none",
            OUTBOX_MAILER_SMTP__DATA_TIMEOUT_SECONDS="2",
            OUTBOX_MAILER_SMTP__SEND_TIMEOUT_SECONDS="2",
            OUTBOX_MAILER_RESCUE_AFTER_SECONDS="12",
            OUTBOX_MAILER_RESCUE_INTERVAL_SECONDS="0.5",
            OUTBOX_MAILER_CONCURRENCY="200",
            OUTBOX_MAILER_DEFAULT_FROM="app@example.com",
        )
        first = fleet.start(env, "batch-killed")
        wait_until(lambda: len(server.sends("/emails/batch")) == 1, 30, what="the batch request is open")
        time.sleep(0.5)  # the request is held by the provider for 3 s
        first.kill9()
        assert status_counts(db_url) == {"sending": ROWS}, "killed with the whole batch in flight"
        recorded = sql(db_url, "SELECT idempotency_key, cardinality(member_ids), sends FROM email_batches")
        [original] = server.sends("/emails/batch")
        assert recorded == [[original.headers["idempotency-key"], str(ROWS), "1"]], "recorded before the request"

        rescuer = fleet.start(env, "batch-rescuer")
        wait_until(lambda: status_counts(db_url) == {"sent": ROWS}, 60,
                   what=lambda: f"every row sent; now {status_counts(db_url)}")
        rescuer.terminate()
        assert rescuer.wait(20) == 0, rescuer.log_tail()

        requests = server.sends("/emails/batch")
        assert len(requests) == 2, [r.headers.get("idempotency-key") for r in requests]
        assert requests[1].headers["idempotency-key"] == original.headers["idempotency-key"]
        assert requests[1].body == original.body, "the same members in the same order"
        assert not server.sends("/emails"), "no member was sent singly under its own key"
        assert dict(server.accepted_by_header) == dict.fromkeys(keys, 1), "each email delivered once"
        assert server.replays >= 1, "the provider absorbed the resend"
        assert sql(db_url, "SELECT sends FROM email_batches") == [["2"]]
        assert "resending batch" in rescuer.log()
    finally:
        server.stop()
