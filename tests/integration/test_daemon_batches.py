"""The daemon's batch sends against the fake provider over loopback HTTP.

Rows due on a batching transport go out many to a request, each row gets its own
outcome, the batch is recorded (members and key) before its request, and an
ambiguous answer is resent by the rescuer as the identical batch under the same key:
the provider delivers each email once.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from outbox_mailer.daemon.metrics import Metrics
from outbox_mailer.providers.seam import batch_idempotency_key
from tests.in_process_daemon import settings_for
from tests.provider_server import KEY_HEADER, ProviderServer
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio


async def insert(store: SqlStore, n: int, prefix: str = "b", **columns: str) -> list[str]:
    extra = "".join(f", {c}" for c in columns)
    values = "".join(f", {v}" for v in columns.values())
    await store.execute(
        f"INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, headers{extra}) "
        f"SELECT $1 || g, ARRAY[$1 || g || '@example.com'], 'about ' || g, 'body', "
        f"jsonb_build_object('{KEY_HEADER}', $1 || g){values} FROM generate_series(1, $2) g", prefix, n)
    return [f"{prefix}{i}" for i in range(1, n + 1)]


async def settled(store: SqlStore, n: int, timeout: float = 20) -> dict[str, str]:
    with anyio.fail_after(timeout):
        while True:
            rows = {r["dedupe_key"]: r["status"] for r in await store.fetch(
                "SELECT dedupe_key, status FROM email_deliveries")}
            if len(rows) == n and all(s not in ("pending", "sending") for s in rows.values()):
                return rows
            await anyio.sleep(0.05)


async def test_rows_go_many_to_a_request_and_each_gets_its_own_id(store: SqlStore, resend: Any) -> None:
    server = ProviderServer().start()
    try:
        keys = await insert(store, 250)
        await resend(server)
        assert set((await settled(store, 250)).values()) == {"sent"}
        batch_requests = server.sends("/emails/batch")
        assert 3 <= len(batch_requests) <= 10 and not server.sends("/emails"), "a hundred or fewer to a request"
        assert all(len(r.json()) <= 100 for r in batch_requests)
        assert dict(server.accepted_by_header) == dict.fromkeys(keys, 1)
        ids = await store.fetch("SELECT count(DISTINCT provider_message_id) AS n FROM email_deliveries")
        assert ids[0]["n"] == 250, "each row has the provider's id of its own email"
        recorded = await store.fetch("SELECT idempotency_key, member_ids FROM email_batches")
        sent_keys = {r.headers["idempotency-key"] for r in batch_requests}
        assert {r["idempotency_key"] for r in recorded} == sent_keys, "every request's key was recorded first"
        members = await store.fetch("SELECT array_agg(dedupe_key ORDER BY ord) AS keys FROM email_batches b, "
                                    "unnest(b.member_ids) WITH ORDINALITY AS m(id, ord) JOIN email_deliveries d "
                                    "ON d.id = m.id GROUP BY b.id")
        assert {batch_idempotency_key(m["keys"]) for m in members} == sent_keys, "the key derives from the members"
        assert (await store.fetch("SELECT count(*) AS n FROM email_queue"))[0]["n"] == 0
    finally:
        server.stop()


async def test_batch_false_sends_one_request_per_email(store: SqlStore, resend: Any) -> None:
    server = ProviderServer().start()
    try:
        await insert(store, 20)
        await resend(server, batch=False)
        await settled(store, 20)
        assert len(server.sends("/emails")) == 20 and not server.sends("/emails/batch")
    finally:
        server.stop()


async def test_rows_with_attachments_go_singly_beside_the_batch(store: SqlStore, resend: Any) -> None:
    server = ProviderServer().start()
    try:
        await insert(store, 10)
        await insert(store, 2, prefix="att", attachments="""'[{"filename": "a.txt", "content_type": "text/plain",
                     "content_base64": "eA=="}]'::jsonb""")
        await resend(server)
        assert set((await settled(store, 12)).values()) == {"sent"}
        singles = [r.json()["to"] for r in server.sends("/emails")]
        assert sorted(singles) == [["att1@example.com"], ["att2@example.com"]]
        assert sum(len(r.json()) for r in server.sends("/emails/batch")) == 10
    finally:
        server.stop()


async def test_an_ambiguous_batch_is_resent_whole_under_its_key_and_delivered_once(
        store: SqlStore, resend: Any) -> None:
    server = ProviderServer().start()
    server.add_fault("accept_500", count=1, paths=("/emails/batch",))
    try:
        keys = await insert(store, 40)
        await resend(server, rescue_after_seconds=4, rescue_interval_seconds=0.3)
        assert set((await settled(store, 40, timeout=30)).values()) == {"sent"}
        requests = server.sends("/emails/batch")
        assert len(requests) == 2, "the first answer was a 500 after acceptance; the rescuer sent it again"
        first, again = requests
        assert again.headers["idempotency-key"] == first.headers["idempotency-key"]
        assert again.body == first.body, "the identical batch, never its members under other keys"
        assert dict(server.accepted_by_header) == dict.fromkeys(keys, 1), "the replay was absorbed"
        sends = await store.fetch("SELECT sends FROM email_batches")
        assert [r["sends"] for r in sends] == [2]
        outcomes = await store.fetch("SELECT outcome, count(*) AS n FROM email_delivery_attempts GROUP BY 1")
        assert {r["outcome"]: r["n"] for r in outcomes} == {"ambiguous": 40, "sent": 40}, \
            "the given-up attempt of each member is in its history, then the rescuer's"
    finally:
        server.stop()


async def test_two_requests_a_second_carry_hundreds_of_emails_a_second(store: SqlStore, resend: Any) -> None:
    server = ProviderServer(rate_per_second=2, burst=2).start()
    try:
        keys = await insert(store, 600)
        await resend(server, rate=2.0)
        assert set((await settled(store, 600, timeout=30)).values()) == {"sent"}, "one email a request: 300 s"
        # the provider's own bucket may refuse a request the daemon's bucket allowed (clocks differ by
        # milliseconds): refused requests delivered nothing, and their rows went in a later batch
        assert sum(server.batches.values()) <= 8, "six to eight accepted requests of up to 100 emails"
        assert dict(server.accepted_by_header) == dict.fromkeys(keys, 1)
    finally:
        server.stop()


async def given_up(store: SqlStore, n: int, timeout: float = 20) -> None:
    """Wait until the first request's ambiguous attempt of each of ``n`` members is written (the batch
    was given up to a rescuer)."""
    with anyio.fail_after(timeout):
        while (await store.fetch("SELECT count(*) AS n FROM email_delivery_attempts "
                                 "WHERE outcome = 'ambiguous'"))[0]["n"] < n:
            await anyio.sleep(0.05)


async def left_sending(store: SqlStore, keys: list[str], timeout: float = 20) -> dict[str, str]:
    """The statuses of ``keys`` once none of them is 'sending' or 'pending' any more."""
    with anyio.fail_after(timeout):
        while True:
            rows = {r["dedupe_key"]: r["status"] for r in await store.fetch(
                "SELECT dedupe_key, status FROM email_deliveries WHERE dedupe_key = ANY($1::text[])", keys)}
            if all(s not in ("pending", "sending") for s in rows.values()):
                return rows
            await anyio.sleep(0.05)


@pytest.mark.parametrize("in_doubt", ["resend", "hold"])
async def test_a_batch_of_rows_from_several_claims_is_rescued_whole_under_its_key(
        store: SqlStore, resend: Any, in_doubt: str) -> None:
    server = ProviderServer().start()
    server.add_fault("accept_500", count=1, paths=("/emails/batch",))
    try:
        keys = await insert(store, 20)
        # the rescue delay keeps every claim young for the whole test: only the rows made old below are due
        await resend(server, in_doubt=in_doubt, rescue_after_seconds=60, rescue_interval_seconds=0.2)
        await given_up(store, 20)
        older = keys[:8]  # these members came from an earlier claim than the others
        await store.execute("UPDATE email_deliveries SET claimed_at = claimed_at - interval '1 hour' "
                            "WHERE dedupe_key = ANY($1::text[])", older)
        assert set((await left_sending(store, older)).values()) == {"sent"}, "rescued by a replay of the batch"
        assert not server.sends("/emails"), "no member went singly under its own key"
        assert dict(server.accepted_by_header) == dict.fromkeys(keys, 1), "the provider created each email once"
        assert set((await settled(store, 20)).values()) == {"sent"}, "the younger members went in the same replay"
        first, again = server.sends("/emails/batch")
        assert (again.headers["idempotency-key"], again.body) == (first.headers["idempotency-key"], first.body)
    finally:
        server.stop()


async def test_a_row_whose_single_send_had_an_unknown_outcome_goes_again_singly_under_its_own_key(
        store: SqlStore, resend: Any) -> None:
    server = ProviderServer().start()
    server.add_fault("accept_500", count=1, paths=("/emails",))  # created, then answered 500
    try:
        [solo] = await insert(store, 1, prefix="solo")
        others = await insert(store, 5, scheduled_at="now() + interval '1 hour'")
        # its retry is due within the hour too: the six are made due together below, to go in one claim
        await resend(server, retry={"base_seconds": 3600, "max_seconds": 3600})
        await given_up(store, 1)
        await store.execute("UPDATE email_deliveries SET scheduled_at = now() WHERE status = 'pending'")
        assert set((await settled(store, 6)).values()) == {"sent"}
        assert dict(server.accepted_by_header) == dict.fromkeys([solo, *others], 1), "each email created once"
        assert [r.headers["idempotency-key"] for r in server.sends("/emails")] == [solo, solo]
        assert [len(r.json()) for r in server.sends("/emails/batch")] == [5], "the others went in a batch"
    finally:
        server.stop()


async def suppress(store: SqlStore, address: str) -> None:
    await store.execute("INSERT INTO email_suppressions (address, reason, source) VALUES ($1, 'complaint', 'test')",
                        address)


@pytest.mark.parametrize("first_request", ["accept_500", "drop"])
async def test_a_batch_replay_is_the_identical_request_as_screened_when_first_sent(
        store: SqlStore, resend: Any, first_request: str) -> None:
    server = ProviderServer().start()
    server.add_fault(first_request, count=1, paths=("/emails/batch",))
    try:
        keys = await insert(store, 10)
        await store.execute("UPDATE email_deliveries SET to_addresses = to_addresses || 'gone@example.com'::text "
                            "WHERE dedupe_key = 'b1'")
        await suppress(store, "gone@example.com")  # before the first request: left out of it
        await resend(server, rescue_after_seconds=4, rescue_interval_seconds=0.2)
        assert set((await settled(store, 10, timeout=30)).values()) == {"sent"}
        first, *again = server.sends("/emails/batch")
        assert again, "the batch was resent"
        assert b"gone@example.com" not in first.body
        assert all(r.body == first.body for r in again), "the replay is the request as first screened, byte for byte"
        assert server.conflicts == 0, "no repeat under the key carried another payload"
        assert dict(server.accepted_by_header) == dict.fromkeys(keys, 1)
    finally:
        server.stop()


async def test_a_recipient_suppressed_after_the_batch_request_gets_the_identical_replay_and_is_counted(
        store: SqlStore, resend: Any, db_url: str) -> None:
    server = ProviderServer().start()
    server.add_fault("accept_500", count=1, paths=("/emails/batch",))
    try:
        keys = await insert(store, 10)
        metrics = Metrics(settings_for(db_url, SimpleNamespace(host="127.0.0.1", port=1), default_transport="resend",
                                       transports={"resend": {"kind": "resend", "api_key": "test"}}))
        await resend(server, rescue_after_seconds=60, rescue_interval_seconds=0.2, observer=metrics)
        await given_up(store, 10)
        await suppress(store, "b3@example.com")  # a complaint about the first request's email, say
        await store.execute("UPDATE email_deliveries SET claimed_at = claimed_at - interval '1 hour'")
        assert set((await settled(store, 10)).values()) == {"sent"}
        first, again = server.sends("/emails/batch")
        assert again.body == first.body and server.conflicts == 0, "the provider could absorb the replay"
        assert dict(server.accepted_by_header) == dict.fromkeys(keys, 1)
        assert metrics.registry.get_sample_value("outbox_mailer_batch_replay_suppressed_recipients_total",
                                                 {"transport": "resend"}) == 1
    finally:
        server.stop()
