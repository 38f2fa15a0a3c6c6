"""An email enqueued through outbox_mailer.client and committed is sent by the real daemon to a real SMTP server,
as it was given."""

from __future__ import annotations

import email
import email.policy
from email.message import EmailMessage
from typing import Any

import psycopg
import pytest

from outbox_mailer.client import Attachment, Email, enqueue, status
from tests.smtp_server import SmtpTestServer

pytestmark = pytest.mark.anyio

PDF = b"%PDF-1.7\n\x00\xff binary"


async def test_a_committed_enqueue_is_sent_by_the_daemon_with_its_attachments_and_headers(
    running: Any, db_url: str, smtp_server: SmtpTestServer
) -> None:
    given = Email(
        dedupe_key="welcome-7", to=["Zoë <zoe@example.com>"], cc=["cc@example.com"], bcc=["audit@example.com"],
        subject="Welcome ✓", text="Hello Zoë", html="<p>Hello Zoë</p>", reply_to="help@example.com",
        headers={"X-Campaign": "spring", "List-Unsubscribe": "<https://example.com/u/7>"},
        attachments=[Attachment("terms.pdf", PDF, "application/pdf"), Attachment("note.txt", b"n", "text/plain")],
        metadata={"user": 7},
    )
    with psycopg.connect(db_url) as conn:
        assert enqueue(conn, given) is True
        assert enqueue(conn, Email(dedupe_key="rolled-back", to=["x@example.com"], subject="s", text="t"))
        conn.rollback()  # the business transaction failed: neither email exists
        assert enqueue(conn, given) is True
    # committed on leaving the block
    r = await running()
    rows = await r.final("welcome-7")
    assert rows["welcome-7"]["status"] == "sent"
    with psycopg.connect(db_url) as conn:
        sent = status(conn, "welcome-7")
        assert status(conn, "rolled-back") is None
    assert sent is not None and sent.status == "sent" and sent.attempts == 1 and sent.sent_at is not None

    [received] = smtp_server.accepted
    assert sorted(received.rcpt_tos) == ["audit@example.com", "cc@example.com", "zoe@example.com"]
    message = email.message_from_bytes(received.data, policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    assert (message["To"], message["Cc"], message["Subject"]) == ("Zoë <zoe@example.com>", "cc@example.com",
                                                                   "Welcome ✓")
    assert message["Bcc"] is None
    assert (message["Reply-To"], message["X-Campaign"]) == ("help@example.com", "spring")
    assert message["List-Unsubscribe"] == "<https://example.com/u/7>"
    assert message["Message-ID"] == rows["welcome-7"]["message_id"]
    body = message.get_body(("plain",))
    assert body is not None and body.get_content().strip() == "Hello Zoë"
    attached = [(part.get_filename(), part.get_content_type(), part.get_payload(decode=True))
                for part in message.iter_attachments()]
    assert attached == [("terms.pdf", "application/pdf", PDF), ("note.txt", "text/plain", b"n")]


async def test_an_email_naming_a_template_is_rendered_in_its_locale_by_the_daemon(
    running: Any, db_url: str, smtp_server: SmtpTestServer
) -> None:
    with psycopg.connect(db_url) as conn:
        for locale, subject, text in (("en", "Welcome {{ name }}", "Hello {{ name }}"),
                                      ("pt", "Bem-vinda {{ name }}", "Olá {{ name }}")):
            conn.execute("INSERT INTO email_templates (name, locale, version, subject, text_body, created_by) "
                         "VALUES ('welcome', %s, 1, %s, %s, 'test')", (locale, subject, text))
        assert enqueue(conn, Email(dedupe_key="t-1", to=["ana@example.com"], template="welcome",
                                   template_data={"name": "Ana"}, locale="pt-BR")) is True
    with psycopg.connect(db_url) as conn, pytest.raises(psycopg.errors.CheckViolation, match='no template named "nope"'):
        enqueue(conn, Email(dedupe_key="t-2", to=["ana@example.com"], template="nope"))
    rows = await (await running()).final("t-1")
    assert rows["t-1"]["status"] == "sent"
    message = email.message_from_bytes(smtp_server.accepted[0].data, policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    body = message.get_body(("plain",))
    assert message["Subject"] == "Bem-vinda Ana" and body is not None and body.get_content().strip() == "Olá Ana"


def test_an_email_naming_a_provider_template_is_written_with_its_name_and_model(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        assert enqueue(conn, Email(dedupe_key="p-1", to=["ana@example.com"], provider_template="d-0123abcd",
                                   template_data={"name": "Ana"})) is True
        row = conn.execute("SELECT provider_template, template_data, subject, text_body FROM email_deliveries "
                           "WHERE dedupe_key = 'p-1'").fetchone()
    assert row == ("d-0123abcd", {"name": "Ana"}, None, None)
