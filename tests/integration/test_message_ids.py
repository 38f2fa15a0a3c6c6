"""The claim writes each row's Message-ID at its first claim, and every later claim keeps it.

The form is ``<13 hex digits of the first claim's time in µs><19 hex digits of HMAC-SHA256(secret,
dedupe key)>@<sender's domain>``, computed by the claim statement itself (outbox_mailer/message/message_ids.py).
These tests check it against Python's own HMAC, for the domain cases, for a row first claimed before
schema 10, and for a value someone else wrote into the column.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import re
import time

import pytest

from outbox_mailer.delivery import Status
from outbox_mailer.message.message_ids import MessageIdKey
from outbox_mailer.store import ClaimSession
from tests.integration.test_store import write_for
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio

SECRET = b"claim-secret"
KEY = MessageIdKey.of(SECRET, "Default <noreply@Default.Example.org>")


def mac(dedupe_key: str, digits: int) -> str:
    return hmac.new(SECRET, dedupe_key.encode(), hashlib.sha256).hexdigest()[:digits]


async def add(store: SqlStore, key: str, from_address: str | None = None) -> None:
    await store.execute("INSERT INTO email_deliveries (dedupe_key, from_address, to_addresses, subject, text_body) "
                        "VALUES ($1, $2, ARRAY['a@example.com'], 'hi', 'body')", key, from_address)


async def stored(store: SqlStore, key: str) -> str | None:
    [r] = await store.fetch("SELECT message_id FROM email_deliveries WHERE dedupe_key = $1", key)
    return r["message_id"]


@pytest.fixture
async def session(db_url: str):  # type: ignore[no-untyped-def]
    s = await ClaimSession.open(db_url)
    yield s
    await s.close()


async def test_the_first_claim_writes_the_message_id_before_anything_is_sent(
        store: SqlStore, session: ClaimSession) -> None:
    await add(store, "order-1", "Shop <noreply@Shop.Example.com>")
    before = time.time_ns() // 1000
    [d] = await session.claim_due(1, "w", message_ids=KEY)
    after = time.time_ns() // 1000
    m = re.fullmatch(r"<([0-9a-f]{13})([0-9a-f]{19})@shop\.example\.com>", d.message_id or "")
    assert m is not None, d.message_id
    assert before - 1_000_000 <= int(m[1], 16) <= after + 1_000_000  # the claim's time, in µs
    assert m[2] == mac("order-1", 19)
    assert await stored(store, "order-1") == d.message_id, "written while the row is still 'sending'"


async def test_every_later_claim_keeps_it_and_the_outcome_write_leaves_it(
        store: SqlStore, session: ClaimSession) -> None:
    await add(store, "retry-1", "shop@example.com")
    [first] = await session.claim_due(1, "w", message_ids=KEY)
    assert await session.record_outcomes([write_for(first, Status.PENDING)]) == {first.id}
    await store.execute("UPDATE email_queue SET scheduled_at = now() - interval '1 s'")
    [second] = await session.claim_due(1, "w", message_ids=MessageIdKey.of(b"another secret", None))
    assert second.attempts == 2 and second.message_id == first.message_id
    assert await session.record_outcomes([write_for(second, Status.SENT)]) == {second.id}
    assert await stored(store, "retry-1") == first.message_id


async def test_the_sender_domain_decides_the_right_hand_side(store: SqlStore, session: ClaimSession) -> None:
    await add(store, "plain", "a@Plain.Example.net")
    await add(store, "defaulted", None)
    await add(store, "idn", "Bücher <info@bücher.example>")  # SQL has no IDNA: the default sender's domain
    await add(store, "quoted", '"x@y" <"we@ird"@quoted.example>')
    await add(store, "spaced", "Shop <shop@Spaced.Example.com >  ")
    await add(store, "dotted", "a@İbm.example")  # lower('İ') is 'i' under some collations: not the sender's
    claimed = {d.dedupe_key: d.message_id for d in await session.claim_due(10, "w", message_ids=KEY)}
    assert {k: v.split("@", 1)[1] for k, v in claimed.items()} == {
        "plain": "plain.example.net>", "defaulted": "default.example.org>", "idn": "default.example.org>",
        "quoted": "quoted.example>", "spaced": "spaced.example.com>", "dotted": "default.example.org>"}


async def test_a_row_first_claimed_before_schema_10_gets_the_form_it_was_sent_with(
        store: SqlStore, session: ClaimSession) -> None:
    # a daemon before schema 10 sent <first 32 hex digits of the HMAC@domain>, stored with the outcome or not at all
    await add(store, "legacy", "shop@example.com")
    await store.execute("UPDATE email_deliveries SET first_attempt_at = now() - interval '1 h', attempts = 1 "
                        "WHERE dedupe_key = 'legacy'")
    [d] = await session.claim_due(1, "w", message_ids=KEY)
    assert d.message_id == f"<{mac('legacy', 32)}@example.com>"


async def test_a_rescued_claim_of_an_older_daemon_is_resent_and_recorded_with_the_form_it_sent(
        db_url: str, store: SqlStore, session: ClaimSession) -> None:
    # an older daemon claimed it (first_attempt_at set, no message_id written) and died
    await add(store, "orphan", "shop@example.com")
    [d] = await session.claim_due(1, "w", message_ids=KEY)
    await store.execute("UPDATE email_deliveries SET message_id = NULL, claimed_at = now() - interval '1 h' "
                        "WHERE dedupe_key = 'orphan'")
    await session.release_locks(["orphan"])
    rescuer = await ClaimSession.open(db_url)
    try:
        [dead] = await rescuer.find_dead_claims(60, 10, message_ids=KEY)
        legacy = f"<{mac('orphan', 32)}@example.com>"
        assert dead.delivery.message_id == legacy
        write = write_for(dead.delivery, Status.SENT)
        write = dataclasses.replace(write, attempt=dataclasses.replace(write.attempt, message_id=legacy))
        assert await rescuer.record_outcomes([write]) == {d.id}
    finally:
        await rescuer.close()
    assert await stored(store, "orphan") == legacy


async def test_a_value_written_into_the_column_before_the_first_claim_is_replaced(
        store: SqlStore, session: ClaimSession) -> None:
    await add(store, "forged", "shop@example.com")
    await store.execute("UPDATE email_deliveries SET message_id = E'<x@y>\\r\\nBcc: victim@example.net' "
                        "WHERE dedupe_key = 'forged'")
    [d] = await session.claim_due(1, "w", message_ids=KEY)
    assert d.message_id is not None and d.message_id.endswith(f"{mac('forged', 19)}@example.com>")


async def test_later_claims_give_later_ids_so_the_attempt_index_grows_at_its_right_edge(
        store: SqlStore, session: ClaimSession) -> None:
    ids = []
    for i in range(5):
        await add(store, f"seq-{i}", "shop@example.com")
        [d] = await session.claim_due(1, "w", message_ids=KEY)
        ids.append(d.message_id)
    assert ids == sorted(ids) and len(set(ids)) == 5
