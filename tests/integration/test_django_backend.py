"""Django's email backend in a real Django project on PostgreSQL: the caller's transaction decides, a key given
twice is one row, a refused row leaves the caller's transaction usable, and the real daemon sends to a real SMTP
server what Django composed."""

from __future__ import annotations

import email
import email.policy
from collections.abc import Iterator
from email.message import EmailMessage as ReceivedMessage
from typing import Any

import anyio
import psycopg
import pytest

from tests.conftest import cloned_database
from tests.django_project import configure, point_at
from tests.otel_spans import Spans, traceparent_of
from tests.smtp_server import SmtpTestServer

configure()

from django.core.mail import (  # noqa: E402  (Django's settings come first)
    EmailMessage,
    EmailMultiAlternatives,
    get_connection,
    send_mail,
    send_mass_mail,
)
from django.db import IntegrityError, connections, transaction  # noqa: E402
from django.test import override_settings  # noqa: E402

PDF = b"%PDF-1.7\n\x00\xff binary"
REFUSED_SUBJECT = "refused at the insert"


class Boom(Exception):
    pass


@pytest.fixture
def django_db(db_url: str) -> Iterator[str]:
    """Django's ``default`` alias on the test's database (the ``outbox`` alias points nowhere)."""
    point_at("default", db_url)
    yield db_url
    connections.close_all()
    point_at("default", None)


def rows(db_url: str) -> list[tuple[str, str]]:
    """(dedupe_key, subject) of every row, as a second client sees it: only what was committed."""
    with psycopg.connect(db_url) as conn:
        return [(k, s) for k, s in conn.execute("SELECT dedupe_key, subject FROM email_deliveries ORDER BY id")]


def keyed(key: str, subject: str = "Your order") -> EmailMessage:
    return EmailMessage(subject, "Thanks!", None, ["zoe@example.com"], headers={"Outbox-Dedupe-Key": key})


def test_a_committed_send_mail_is_a_row_and_a_rolled_back_one_is_none(django_db: str) -> None:
    with transaction.atomic():
        assert send_mail("Committed", "body", None, ["zoe@example.com"]) == 1
        assert send_mass_mail((("Mass 1", "b", None, ["a@example.com"]), ("Mass 2", "b", None, ["b@example.com"]))
                              ) == 2
        assert rows(django_db) == []  # not yet committed: the daemon cannot see it
    with pytest.raises(Boom), transaction.atomic():
        send_mail("Rolled back", "body", None, ["zoe@example.com"])
        raise Boom
    assert [subject for _, subject in rows(django_db)] == ["Committed", "Mass 1", "Mass 2"]


def test_send_mail_in_an_opentelemetry_span_writes_that_spans_traceparent(django_db: str, spans: Spans) -> None:
    from opentelemetry import trace

    with trace.get_tracer("shop").start_as_current_span("signup"):
        assert send_mail("Welcome", "body", None, ["zoe@example.com"]) == 1
    with psycopg.connect(django_db) as conn:
        assert conn.execute("SELECT traceparent FROM email_deliveries").fetchall() == [
            (traceparent_of(spans.named("signup")[0]),)]


def test_the_same_key_twice_is_one_row_and_each_call_counts_it(django_db: str) -> None:
    assert keyed("order-1042").send() == 1
    with transaction.atomic():
        assert keyed("order-1042", "Again").send() == 1  # the outbox holds it: it is sent once
    assert rows(django_db) == [("order-1042", "Your order")]


@pytest.fixture
def refusing_table(django_db: str) -> str:
    """The table refuses one subject at the INSERT (a constraint of the test's own, standing for any refusal
    the client cannot foresee: a grant missing, an application's trigger)."""
    with psycopg.connect(django_db) as conn:
        conn.execute(f"ALTER TABLE email_deliveries ADD CONSTRAINT test_refuses CHECK (subject <> '{REFUSED_SUBJECT}')")
    return django_db


def test_fail_silently_leaves_out_a_refused_row_and_the_caller_s_transaction_stays_usable(
    refusing_table: str,
) -> None:
    with transaction.atomic(), connections["default"].cursor() as cursor:
        cursor.execute("CREATE TABLE orders (id int)")  # the caller's own work in the same transaction
        written = get_connection(fail_silently=True).send_messages(
            [keyed("bad", REFUSED_SUBJECT), keyed("good")])
        assert written == 1
        cursor.execute("INSERT INTO orders VALUES (1042)")  # the transaction is not aborted
    assert rows(refusing_table) == [("good", "Your order")]
    with psycopg.connect(refusing_table) as conn:
        assert conn.execute("SELECT id FROM orders").fetchall() == [(1042,)]


def test_without_fail_silently_a_refused_row_raises_and_the_caller_may_go_on(refusing_table: str) -> None:
    with transaction.atomic():
        with pytest.raises(IntegrityError, match="test_refuses"):
            keyed("bad", REFUSED_SUBJECT).send()
        assert keyed("good").send() == 1
    assert rows(refusing_table) == [("good", "Your order")]


def test_outbox_mailer_database_names_the_alias_whose_transaction_governs(
    django_db: str, pg_server: str, template_db: str
) -> None:
    with cloned_database(pg_server, template_db) as outbox_url, override_settings(OUTBOX_MAILER_DATABASE="outbox"):
        point_at("outbox", outbox_url)
        try:
            with pytest.raises(Boom), transaction.atomic(using="outbox"):
                keyed("rolled-back").send()
                raise Boom
            with transaction.atomic(using="default"):  # another alias's transaction: no say over the row
                keyed("committed").send()
                transaction.set_rollback(True, using="default")
            assert rows(outbox_url) == [("committed", "Your order")]
            assert rows(django_db) == []
        finally:
            connections["outbox"].close()
            point_at("outbox", None)


def composed_in_django(key: str) -> int:
    """What a Django view does: one email with every part, sent twice under one key, each in its transaction."""
    written = 0
    try:
        for _ in range(2):
            message = EmailMultiAlternatives(
                "Welcome ✓", "Hello Zoë", "Shop <shop@example.com>", ["Zoë <zoe@example.com>"],
                bcc=["audit@example.com"], cc=["cc@example.com"], reply_to=["help@example.com"],
                headers={"Outbox-Dedupe-Key": key, "X-Campaign": "spring"})
            message.attach_alternative("<p>Hello Zoë</p>", "text/html")
            message.attach("terms.pdf", PDF, "application/pdf")
            with transaction.atomic():
                written += message.send()
    finally:
        connections.close_all()  # this thread's connection
    return written



@pytest.mark.anyio
async def test_the_daemon_sends_what_django_composed_once_for_a_key_given_twice(
    django_db: str, running: Any, smtp_server: SmtpTestServer
) -> None:
    # Django's database calls are synchronous: they run in a thread, as in a WSGI view
    assert await anyio.to_thread.run_sync(composed_in_django, "welcome-7") == 2
    r = await running()
    assert (await r.final("welcome-7"))["welcome-7"]["status"] == "sent"

    [received] = smtp_server.accepted
    assert sorted(received.rcpt_tos) == ["audit@example.com", "cc@example.com", "zoe@example.com"]
    message = email.message_from_bytes(received.data, policy=email.policy.default)
    assert isinstance(message, ReceivedMessage)
    assert (message["From"], message["To"], message["Cc"], message["Reply-To"]) == (
        "Shop <shop@example.com>", "Zoë <zoe@example.com>", "cc@example.com", "help@example.com")
    assert (message["Subject"], message["X-Campaign"]) == ("Welcome ✓", "spring")
    assert message["Bcc"] is None and message["Outbox-Dedupe-Key"] is None
    text, html = message.get_body(("plain",)), message.get_body(("html",))
    assert text is not None and text.get_content().strip() == "Hello Zoë"
    assert html is not None and html.get_content().strip() == "<p>Hello Zoë</p>"
    assert [(p.get_filename(), p.get_content_type(), p.get_payload(decode=True))
            for p in message.iter_attachments()] == [("terms.pdf", "application/pdf", PDF)]


def test_a_message_naming_a_template_is_a_row_without_subject_or_body(django_db: str) -> None:
    with psycopg.connect(django_db) as conn:
        conn.execute("INSERT INTO email_templates (name, locale, version, subject, text_body, created_by) "
                     "VALUES ('welcome', 'en', 1, 'Hi {{ name }}', 'Hello {{ name }}', 'test')")
    message = EmailMessage(to=["zoe@example.com"], headers={
        "Outbox-Dedupe-Key": "tpl-1", "Outbox-Template": "welcome", "Outbox-Template-Data": '{"name": "Zoë"}',
        "Outbox-Locale": "en-GB"})
    assert message.send() == 1
    with psycopg.connect(django_db) as conn:
        row = conn.execute("SELECT subject, text_body, template, template_data, locale, template_version, headers "
                           "FROM email_deliveries WHERE dedupe_key = 'tpl-1'").fetchone()
    assert row == (None, None, "welcome", {"name": "Zoë"}, "en", 1, {})
    both = EmailMessage("A subject", "A body", None, ["zoe@example.com"], headers={"Outbox-Template": "welcome"})
    with pytest.raises(ValueError, match="give a template or a subject and body, not both"):
        both.send()
