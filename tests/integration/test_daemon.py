"""The daemon in-process against a real PostgreSQL and a real SMTP server."""

from __future__ import annotations

import email
import email.policy
from typing import Any

import anyio
import pytest

from outbox_mailer.errors import DatabaseError
from outbox_mailer.store import Store
from tests.integration.conftest import abandon_at_shutdown, insert
from tests.smtp_server import SmtpTestServer

pytestmark = pytest.mark.anyio

# advisory locks held (by anyone) on the keys of rows whose dedupe_key is LIKE $1
LOCKS_OF_KEYS = """
SELECT count(*) AS n FROM pg_locks l
WHERE l.locktype = 'advisory' AND ((l.classid::bigint << 32) | l.objid::bigint) IN (
    SELECT outbox_mailer_lock_key(dedupe_key) FROM email_deliveries WHERE dedupe_key LIKE $1)
"""


async def test_committed_rows_are_delivered_once_with_their_message_id(
    running: Any, store: Store, smtp_server: SmtpTestServer
) -> None:
    for i in range(20):
        await insert(store, f"k{i}")
    r = await running()
    rows = await r.final(*[f"k{i}" for i in range(20)])
    assert {row["status"] for row in rows.values()} == {"sent"}
    ids = [email.message_from_bytes(m.data, policy=email.policy.default)["Message-ID"]
           for m in smtp_server.accepted]
    assert len(ids) == 20 and len(set(ids)) == 20
    assert set(ids) == {row["message_id"] for row in rows.values()}, "sent with the Message-ID the claim wrote"
    stats = await store.stats()
    assert stats["sent"] == 20 and stats["pending"] == 0


async def test_notify_wakes_an_idle_daemon(running: Any, store: Store) -> None:
    r = await running(poll_interval_seconds=60)
    await anyio.sleep(0.3)  # let it go idle, waiting up to a minute
    await insert(store, "late")
    rows = await r.final("late", timeout=5)  # well under the poll interval: NOTIFY woke it
    assert rows["late"]["status"] == "sent"


async def test_transient_reply_is_retried_with_the_same_message_id(
    running: Any, store: Store, smtp_server: SmtpTestServer
) -> None:
    smtp_server.fail("RCPT", "451 4.7.1 greylisted", times=2)
    await insert(store, "grey")
    r = await running()
    rows = await r.final("grey")
    assert rows["grey"]["status"] == "sent" and rows["grey"]["attempts"] == 3
    attempts = await store.attempts(rows["grey"]["id"])
    assert [(a["attempt"], a["outcome"], a["reply_code"], a["enhanced_code"]) for a in attempts] == [
        (1, "transient", 451, "4.7.1"), (2, "transient", 451, "4.7.1"), (3, "sent", 250, None)]


async def test_permanent_reply_fails_the_row_and_keeps_the_reason(
    running: Any, store: Store, smtp_server: SmtpTestServer
) -> None:
    smtp_server.fail("RCPT", "550 5.1.1 no such user", address="gone@example.com")
    await insert(store, "bounce", to_addresses=["gone@example.com"])
    await insert(store, "fine")
    r = await running()
    rows = await r.final("bounce", "fine")
    assert rows["bounce"]["status"] == "failed" and "550 5.1.1" in rows["bounce"]["last_error"]
    assert rows["fine"]["status"] == "sent"


async def test_attempts_run_out(running: Any, store: Store, smtp_server: SmtpTestServer) -> None:
    smtp_server.fail("MAIL", "421 4.3.2 shutting down")
    await insert(store, "never", max_attempts=3)
    r = await running()
    rows = await r.final("never")
    assert rows["never"]["status"] == "failed" and rows["never"]["attempts"] == 3
    assert "gave up after 3 attempts" in rows["never"]["last_error"]


@pytest.mark.parametrize(
    ("cols", "field", "refused_by"),
    [
        ({"subject": "hi\r\nBcc: victim@example.com"}, "subject", "email_deliveries_subject_no_control_chars"),
        ({"to_addresses": ["not an address"]}, "to_addresses[0]", None),
        ({"headers": {"From": "spoof@example.com"}}, "headers", None),
        ({"headers": {"X-Note": "a\nb"}}, "headers", "email_deliveries_header_values_no_control_chars"),
        ({"transport": "carrier-pigeon"}, "transport", None),
        ({"attachments": [{"filename": "a.bin", "content_type": "application/octet-stream",
                           "content_base64": "not base64!"}]}, "attachments", None),
    ],
)
async def test_rows_that_cannot_be_composed_fail_and_the_rest_go_on(
    running: Any, store: Store, smtp_server: SmtpTestServer, cols: dict[str, Any], field: str,
    refused_by: str | None,
) -> None:
    """What SQL can judge is refused at INSERT (schema 12); the daemon still fails such a row written
    before (the trigger off stands for an older schema), and everything SQL cannot judge."""
    if refused_by is not None:
        with pytest.raises(DatabaseError, match=refused_by):
            await insert(store, "bad", **cols)
        await store.execute("ALTER TABLE email_deliveries DISABLE TRIGGER email_deliveries_check_content")
    await insert(store, "bad", **cols)
    await insert(store, "good")
    r = await running()
    rows = await r.final("bad", "good")
    assert rows["good"]["status"] == "sent"
    assert rows["bad"]["status"] == "failed"
    assert field in rows["bad"]["last_error"]
    assert all(b"victim@example.com" not in m.data for m in smtp_server.messages)
    assert len(smtp_server.messages) == 1


async def test_oversize_message_fails_without_sending(
    running: Any, store: Store, smtp_server: SmtpTestServer
) -> None:
    await insert(store, "huge", text_body="x" * 300_000)
    r = await running(max_message_bytes=100_000)
    rows = await r.final("huge")
    assert rows["huge"]["status"] == "failed" and "over the limit" in rows["huge"]["last_error"]
    assert smtp_server.messages == []


async def test_expired_row_fails_without_sending(
    running: Any, store: Store, smtp_server: SmtpTestServer
) -> None:
    await store.execute(
        "INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, expires_at) "
        "VALUES ('stale', ARRAY['to@example.com'], 's', 'b', now() - interval '1 minute')"
    )
    r = await running()
    rows = await r.final("stale")
    assert rows["stale"]["status"] == "failed" and rows["stale"]["last_error"].startswith("expired")
    assert rows["stale"]["attempts"] == 0, "an expiry is not an attempt"
    assert smtp_server.messages == []


async def test_ambiguous_outcome_is_held_with_policy_hold(
    running: Any, store: Store, smtp_server: SmtpTestServer
) -> None:
    smtp_server.drop("DATA")
    await insert(store, "unsure")
    r = await running(in_doubt="hold")
    rows = await r.final("unsure")
    assert rows["unsure"]["status"] == "in_doubt"
    [attempt] = await store.attempts(rows["unsure"]["id"])
    assert attempt["outcome"] == "ambiguous"


async def test_stop_finishes_in_flight_sends_and_records_them(
    running: Any, store: Store, smtp_server: SmtpTestServer
) -> None:
    smtp_server.delay("DATA", 0.7)
    await insert(store, "slow")
    r = await running()
    await r.wait_for(lambda rows: rows.get("slow", {}).get("status") == "sending", ["slow"])
    r.daemon.stop()
    rows = await r.final("slow")
    assert rows["slow"]["status"] == "sent"
    assert len(smtp_server.accepted) == 1


async def test_stop_after_grace_leaves_the_row_to_the_rescuer(
    running: Any, store: Store, smtp_server: SmtpTestServer, db_url: str
) -> None:
    await abandon_at_shutdown(running, store, smtp_server, "stuck")
    await anyio.sleep(0.2)
    [row] = await store.status(["stuck"])
    assert row["status"] == "sending", "an abandoned send keeps its row; nothing is lost"
    # a later daemon's rescuer settles it once the claim is older than the rescue delay
    smtp_server.clear_faults()
    await store.execute("UPDATE email_deliveries SET claimed_at = now() - interval '1 hour'")
    later = await running(rescue_interval_seconds=0.1)
    rows = await later.final("stuck")
    assert rows["stuck"]["status"] == "sent"
    outcomes = [a["outcome"] for a in await store.attempts(rows["stuck"]["id"])]
    assert outcomes == ["ambiguous", "sent"], "the rescue is recorded as an ambiguous attempt"


async def test_a_row_still_waiting_for_a_connection_when_the_grace_ends_goes_back_unattempted(
    running: Any, store: Store, smtp_server: SmtpTestServer
) -> None:
    # one connection, stuck in DATA; the gate holds the next claimed row ready for it
    smtp_server.delay("DATA", 1.5)
    await insert(store, "first")
    await insert(store, "second")
    smtp = {"host": smtp_server.host, "port": smtp_server.port, "tls": "none", "pool_size": 1,
            "connect_timeout_seconds": 2, "command_timeout_seconds": 2, "data_timeout_seconds": 2}
    r = await running(smtp=smtp, concurrency=2, shutdown_grace_seconds=0.3)
    await r.wait_for(lambda rows: all(row["status"] == "sending" for row in rows.values()) and len(rows) == 2,
                     ["first", "second"])
    r.daemon.stop()
    with anyio.fail_after(5):
        while r.daemon.in_flight:
            await anyio.sleep(0.05)
    rows = {row["dedupe_key"]: row for row in await store.status(["first", "second"])}
    assert rows["first"]["status"] == "sending", "the send cut off by the grace period is left to the rescuer"
    assert rows["second"]["status"] == "pending" and rows["second"]["attempts"] == 0, \
        "the row that never reached the server is given back, its attempt not charged"
    assert await store.attempts(rows["second"]["id"]) == [], "untried: no attempt written"
    assert rows["second"]["last_error"] is None, "nothing went wrong with it"


async def test_smtp_idempotency_header_carries_the_dedupe_key(
    running: Any, store: Store, smtp_server: SmtpTestServer
) -> None:
    await insert(store, "order-42-confirmation")
    await insert(store, "ключ-1")  # not ASCII: a stable digest goes instead
    r = await running(smtp={"host": smtp_server.host, "port": smtp_server.port, "tls": "none",
                            "idempotency_header": "Resend-Idempotency-Key"})
    await r.final("order-42-confirmation", "ключ-1")
    keys = sorted(email.message_from_bytes(m.data, policy=email.policy.default)["Resend-Idempotency-Key"]
                  for m in smtp_server.accepted)
    plain, digest = keys  # "order-..." sorts before "outbox-..."
    assert plain == "order-42-confirmation"
    assert digest.startswith("outbox-") and len(digest) == len("outbox-") + 32
    assert r.daemon.transports["smtp"].idempotency_window_seconds == 86_400


async def test_an_idle_daemon_holds_no_advisory_locks(running: Any, store: Store) -> None:
    # outcome writes leave their unlocks to the next claim; before waiting for work, the daemon releases them
    for i in range(30):
        await insert(store, f"idle{i}")
    r = await running(poll_interval_seconds=60)
    await r.final(*[f"idle{i}" for i in range(30)])
    locks = -1
    with anyio.move_on_after(5):
        while locks != 0:
            await anyio.sleep(0.05)
            [row] = await store.fetch(LOCKS_OF_KEYS, "idle%")
            locks = row["n"]
    assert locks == 0, "an idle daemon still holds advisory locks of rows already recorded"
