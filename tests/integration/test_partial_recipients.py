"""Recipients refused with a temporary reply are not dropped (issue: defects, item 3).

The daemon against a real PostgreSQL and an aiosmtpd server: a 4xx for some
recipients retries those recipients only, later, with the same Message-ID; a
452 "too many recipients" sends the rest in further transactions of the same
attempt; every refusal is kept whole on the attempt row and the row's final
state says who did not get the email.
"""

from __future__ import annotations

import email
import email.policy
from typing import Any

import pytest

from outbox_mailer.store import Store
from tests.integration.conftest import insert
from tests.smtp_server import SmtpTestServer

pytestmark = pytest.mark.anyio


def message_id(data: bytes) -> str:
    return str(email.message_from_bytes(data, policy=email.policy.default)["Message-ID"])


async def columns(store: Store, key: str) -> dict[str, Any]:
    [row] = await store.fetch("SELECT retry_recipients, refused_recipients, status, attempts, last_error "
                              "FROM email_deliveries WHERE dedupe_key = $1", key)
    return row


async def refused_of_attempts(store: Store, key: str) -> list[Any]:
    rows = await store.fetch("SELECT a.refused FROM email_delivery_attempts a JOIN email_deliveries d "
                             "ON d.id = a.delivery_id WHERE d.dedupe_key = $1 ORDER BY a.attempt", key)
    return [r["refused"] for r in rows]


@pytest.mark.parametrize("pipelining", [False, True])
async def test_a_temporary_refusal_retries_that_recipient_only(
    running: Any, store: Store, smtp_server: SmtpTestServer, pipelining: bool
) -> None:
    smtp_server.pipelining = pipelining
    smtp_server.fail("RCPT", "450 4.2.1 mailbox busy", address="b@example.com", times=1)
    await insert(store, "two", to_addresses=["a@example.com", "b@example.com"])
    r = await running()
    rows = await r.final("two")
    assert rows["two"]["status"] == "sent" and rows["two"]["attempts"] == 2
    first, second = smtp_server.accepted
    assert (first.rcpt_tos, second.rcpt_tos) == (("a@example.com",), ("b@example.com",))
    assert message_id(first.data) == message_id(second.data), "the same message, not a new one"
    row = await columns(store, "two")
    assert row["refused_recipients"] == [] and row["retry_recipients"] is None
    [refused, none] = await refused_of_attempts(store, "two")
    assert refused == [{"address": "b@example.com", "reply_code": 450, "message": "4.2.1 mailbox busy",
                        "unknown": False}]
    assert none is None


async def test_recipients_never_reached_are_on_the_row_and_every_refusal_on_the_attempt(
    running: Any, store: Store, smtp_server: SmtpTestServer
) -> None:
    many = [f"user{i:03d}-with-a-long-local-part-to-fill-the-error-column@example.com" for i in range(60)]
    for address in many[1:]:
        smtp_server.fail("RCPT", "450 4.2.1 mailbox busy", address=address)
    await insert(store, "crowd", to_addresses=many, max_attempts=2)
    r = await running()
    rows = await r.final("crowd")
    row = await columns(store, "crowd")
    assert rows["crowd"]["status"] == "sent", "someone got it: the row is sent, not failed"
    assert row["refused_recipients"] == many[1:]
    assert row["last_error"].startswith("not delivered to 59 recipient(s)")
    first, second = await refused_of_attempts(store, "crowd")
    assert [x["address"] for x in first] == many[1:] and [x["address"] for x in second] == many[1:]
    assert len(row["last_error"]) <= 2000 < sum(len(a) for a in many), "the row's text is clipped, the list is not"


@pytest.mark.parametrize("pipelining", [False, True])
async def test_too_many_recipients_are_sent_in_further_transactions(
    running: Any, store: Store, smtp_server: SmtpTestServer, pipelining: bool
) -> None:
    smtp_server.pipelining = pipelining
    smtp_server.recipient_limit = 100
    everyone = [f"r{i}@example.com" for i in range(250)]
    await insert(store, "list", to_addresses=everyone[:1], bcc_addresses=everyone[1:])
    r = await running()
    rows = await r.final("list")
    assert rows["list"]["status"] == "sent" and rows["list"]["attempts"] == 1
    got = [rcpt for m in smtp_server.accepted for rcpt in m.rcpt_tos]
    assert sorted(got) == sorted(everyone), "every recipient exactly once"
    assert len({message_id(m.data) for m in smtp_server.accepted}) == 1
    assert (await columns(store, "list"))["refused_recipients"] == []
