"""The daemon sends over SMTP with a tagged envelope sender (VERP) that proves the row, and, per
recipient, one transaction per recipient whose own outcome is kept (issue #30, item 13)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from outbox_mailer.delivery_events.bounce_tags import BounceAddress, BounceTag, day_of
from outbox_mailer.store import Store
from tests.integration.conftest import insert
from tests.integration.test_partial_recipients import columns, message_id, refused_of_attempts
from tests.smtp_server import SmtpTestServer

pytestmark = pytest.mark.anyio

KEY = "a-bounce-tag-key-of-32-characters"
TAGS = BounceAddress("bounces@example.com", [KEY.encode()])


def tag_of(mail_from: str) -> BounceTag:
    tag = TAGS.read(mail_from, day_of(datetime.now(UTC)))
    assert isinstance(tag, BounceTag), mail_from
    return tag


async def test_the_envelope_sender_is_the_bounce_address_tagged_with_the_row(
        running: Any, store: Store, smtp_server: SmtpTestServer) -> None:
    await insert(store, "shared", to_addresses=["a@example.com"], cc_addresses=["c@example.com"])
    r = await running(bounces={"address": "bounces@example.com", "key": KEY})
    rows = await r.final("shared")
    assert rows["shared"]["status"] == "sent"
    [sent] = smtp_server.accepted
    assert sent.rcpt_tos == ("a@example.com", "c@example.com") and sent.mail_from.isascii()
    assert tag_of(sent.mail_from) == BounceTag(rows["shared"]["id"], 0, day_of(datetime.now(UTC)))


@pytest.mark.parametrize("pipelining", [False, True])
async def test_per_recipient_each_recipient_gets_its_own_transaction_and_tag_and_only_the_refused_is_retried(
        running: Any, store: Store, smtp_server: SmtpTestServer, pipelining: bool) -> None:
    smtp_server.pipelining = pipelining
    smtp_server.fail("RCPT", "450 4.2.1 mailbox busy", address="C@example.com", times=1)
    await insert(store, "each", to_addresses=["a@example.com"], cc_addresses=["Cc <C@example.com>"],
                 bcc_addresses=["b@example.com", "a@example.com"])
    r = await running(bounces={"address": "bounces@example.com", "key": KEY, "per_recipient": True})
    rows = await r.final("each")
    assert rows["each"]["status"] == "sent" and rows["each"]["attempts"] == 2
    tags = {m.rcpt_tos: tag_of(m.mail_from) for m in smtp_server.accepted}
    assert {rcpt: tag.index for rcpt, tag in tags.items()} == {
        ("a@example.com",): 1, ("C@example.com",): 2, ("b@example.com",): 3}, "one transaction each, tagged by position"
    assert {tag.delivery_id for tag in tags.values()} == {rows["each"]["id"]}
    assert len({message_id(m.data) for m in smtp_server.accepted}) == 1, "one message"
    first, second = await refused_of_attempts(store, "each")
    assert [(x["address"], x["reply_code"]) for x in first] == [("C@example.com", 450)]
    assert second is None
    assert (await columns(store, "each"))["retry_recipients"] is None
