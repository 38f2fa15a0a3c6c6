"""email_deliveries.traceparent (schema 25, sql/0025_traceparent.sql): a W3C traceparent checked at INSERT
and by an application's UPDATE that writes it, read by the claim, never checked by the daemon's own writes."""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg
import pytest

from outbox_mailer.decide import RetryPolicy, decide
from outbox_mailer.delivery import Outcome
from outbox_mailer.store import AttemptRecord, ClaimSession, OutcomeWrite
from tests.integration.test_refused_at_insert import asyncpg_insert

pytestmark = pytest.mark.anyio

GOOD = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

# id: (traceparent, DETAIL fragment)
REFUSED: dict[str, tuple[str, str]] = {
    "upper-case": (GOOD.upper(), "lower case"),
    "version-ff": ("ff" + GOOD[2:], "00-<32 hex trace-id>"),
    "version-01": ("01" + GOOD[2:], "00-<32 hex trace-id>"),
    "short-trace-id": (GOOD.replace("4bf92f", "4bf92"), "00-<32 hex trace-id>"),
    "trailing-field": (GOOD + "-what", "00-<32 hex trace-id>"),
    "newline": (GOOD + "\n", "00-<32 hex trace-id>"),
    "empty": ("", "00-<32 hex trace-id>"),
    "zero-trace-id": (f"00-{'0' * 32}-00f067aa0ba902b7-01", "an all-zero trace-id is invalid"),
    "zero-parent-id": (f"00-4bf92f3577b34da6a3ce929d0e0e4736-{'0' * 16}-01", "an all-zero parent-id is invalid"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
async def test_a_malformed_traceparent_is_refused_at_insert_naming_the_column(
        own_conn: asyncpg.Connection, case: str) -> None:
    value, detail = REFUSED[case]
    with pytest.raises(asyncpg.CheckViolationError) as raised:
        await asyncpg_insert(own_conn, case, {"traceparent": value})
    assert raised.value.constraint_name == "email_deliveries_traceparent_valid"
    assert raised.value.column_name == "traceparent"
    assert detail in raised.value.detail


async def test_a_traceparent_or_none_is_accepted_and_an_update_writing_a_bad_one_is_refused(
        own_conn: asyncpg.Connection) -> None:
    await asyncpg_insert(own_conn, "traced", {"traceparent": GOOD})
    await asyncpg_insert(own_conn, "sampled-out", {"traceparent": GOOD[:-2] + "00"})
    await asyncpg_insert(own_conn, "untraced", {})
    rows = await own_conn.fetch("SELECT dedupe_key, traceparent FROM email_deliveries ORDER BY dedupe_key")
    assert [tuple(r) for r in rows] == [("sampled-out", GOOD[:-2] + "00"), ("traced", GOOD), ("untraced", None)]
    with pytest.raises(asyncpg.CheckViolationError) as raised:
        await own_conn.execute("UPDATE email_deliveries SET traceparent = 'nope' WHERE dedupe_key = 'untraced'")
    assert raised.value.constraint_name == "email_deliveries_traceparent_valid"
    await own_conn.execute("UPDATE email_deliveries SET traceparent = NULL WHERE dedupe_key = 'traced'")


async def test_the_claim_reads_the_traceparent_and_the_daemons_writes_never_check_it(
        own_conn: asyncpg.Connection, db_url: str) -> None:
    await asyncpg_insert(own_conn, "traced", {"traceparent": GOOD})
    # a row written past the checks (with the trigger off): the claim and the outcome write still pass
    await own_conn.execute("ALTER TABLE email_deliveries DISABLE TRIGGER email_deliveries_check_content")
    await asyncpg_insert(own_conn, "malformed", {"traceparent": "not a traceparent"})
    await own_conn.execute("ALTER TABLE email_deliveries ENABLE TRIGGER email_deliveries_check_content")
    session = await ClaimSession.open(db_url)
    try:
        claimed = await session.claim_due(10, "w")
        assert {d.dedupe_key: d.traceparent for d in claimed} == {"traced": GOOD, "malformed": "not a traceparent"}
        now = datetime.now(UTC)
        sent = Outcome.sent("q1")
        written = await session.record_outcomes([
            OutcomeWrite(d, decide(d, sent, now, RetryPolicy(), 0.5),
                         AttemptRecord(d.attempts, now, now, sent.kind, 250, None, None, "smtp", "w"))
            for d in claimed])
    finally:
        await session.close()
    assert written == {d.id for d in claimed}
    rows = await own_conn.fetch("SELECT status, traceparent FROM email_deliveries ORDER BY dedupe_key")
    assert [tuple(r) for r in rows] == [("sent", "not a traceparent"), ("sent", GOOD)]
