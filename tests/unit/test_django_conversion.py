"""A Django message becomes the Email the outbox holds: every part Django composes is carried, and what cannot be
carried is refused, never dropped (outbox_mailer.django.conversion)."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from email.mime.application import MIMEApplication
from email.mime.image import MIMEImage

import pytest

from outbox_mailer.client import InvalidEmail
from tests.django_project import DEFAULT_FROM_EMAIL, configure
from tests.unit.test_client_imports import DAEMON_AND_DRIVERS

configure()

from django.core.exceptions import ImproperlyConfigured  # noqa: E402  (Django's settings come first)
from django.core.mail import EmailMessage, EmailMultiAlternatives  # noqa: E402
from django.test import override_settings  # noqa: E402

from outbox_mailer.django import EmailBackend, email_from_message  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n\x00\x00 not really"


def message(**kwargs: object) -> EmailMultiAlternatives:
    values: dict[str, object] = {"subject": "Your order", "body": "Thanks!", "to": ["zoe@example.com"]}
    values.update(kwargs)
    return EmailMultiAlternatives(**values)  # type: ignore[arg-type]


def test_the_fields_of_send_mail_become_the_email_s_fields() -> None:
    email = email_from_message(EmailMessage(
        "Welcome ✓", "Hello Zoë", "Ann <ann@example.com>", ["Zoë <zoe@example.com>", "bob@example.com"],
        cc=["cc@example.com"], bcc=["audit@example.com"], reply_to=["help@example.com"]))
    assert (email.subject, email.text, email.html) == ("Welcome ✓", "Hello Zoë", None)
    assert email.from_address == "Ann <ann@example.com>"
    assert (list(email.to), list(email.cc), list(email.bcc)) == (
        ["Zoë <zoe@example.com>", "bob@example.com"], ["cc@example.com"], ["audit@example.com"])
    assert email.reply_to == "help@example.com"
    assert email.headers == {}


def test_a_message_without_a_sender_has_django_s_default_from_email() -> None:
    assert email_from_message(EmailMessage("s", "b", None, ["zoe@example.com"])).from_address == DEFAULT_FROM_EMAIL


def test_an_html_alternative_becomes_html_beside_the_text_body() -> None:
    m = message()
    m.attach_alternative("<p>Thanks!</p>", "text/html")
    email = email_from_message(m)
    assert (email.text, email.html) == ("Thanks!", "<p>Thanks!</p>")


def test_an_html_body_with_a_plain_alternative_gives_both() -> None:
    m = message(body="<p>Hi</p>", alternatives=[("Hi", "text/plain")])
    m.content_subtype = "html"
    email = email_from_message(m)
    assert (email.text, email.html) == ("Hi", "<p>Hi</p>")


def test_an_empty_body_beside_an_html_alternative_is_no_text() -> None:
    email = email_from_message(message(body="", alternatives=[("<p>Hi</p>", "text/html")]))
    assert (email.text, email.html) == (None, "<p>Hi</p>")


@pytest.mark.parametrize(("alternatives", "field"), [
    ([("BEGIN:VCALENDAR", "text/calendar")], "alternatives[0]"),
    ([("<p>a</p>", "text/html"), ("<p>b</p>", "text/html")], "alternatives[1]"),
    ([("again", "text/plain")], "alternatives[0]"),
])
def test_an_alternative_that_cannot_be_carried_is_refused_by_name(
    alternatives: list[tuple[str, str]], field: str
) -> None:
    with pytest.raises(InvalidEmail) as refused:
        email_from_message(message(alternatives=alternatives))
    assert refused.value.field == field


def test_two_reply_to_addresses_are_refused_since_the_table_holds_one() -> None:
    with pytest.raises(InvalidEmail) as refused:
        email_from_message(message(reply_to=["a@example.com", "b@example.com"]))
    assert refused.value.field == "reply_to"


def test_the_dedupe_key_header_gives_the_key_and_is_not_sent() -> None:
    email = email_from_message(message(headers={"Outbox-Dedupe-Key": "order-1042", "X-Campaign": "spring"}))
    assert email.dedupe_key == "order-1042"
    assert email.headers == {"X-Campaign": "spring"}


def test_without_the_header_each_message_gets_a_new_key() -> None:
    first, second = email_from_message(message()), email_from_message(message())
    assert first.dedupe_key.startswith("django-") and second.dedupe_key.startswith("django-")
    assert first.dedupe_key != second.dedupe_key


def test_outbox_headers_set_the_row_s_columns_and_are_not_sent() -> None:
    email = email_from_message(message(headers={
        "outbox-transport": "resend", "Outbox-Priority": "5", "Outbox-Max-Attempts": 3,
        "Outbox-Scheduled-At": "2026-12-24T09:00:00+01:00", "Outbox-Expires-At": datetime(2026, 12, 25, tzinfo=UTC),
    }))
    assert (email.transport, email.priority, email.max_attempts) == ("resend", 5, 3)
    assert email.scheduled_at == datetime.fromisoformat("2026-12-24T09:00:00+01:00")
    assert email.expires_at == datetime(2026, 12, 25, tzinfo=UTC)
    assert email.headers == {}


@pytest.mark.parametrize(("headers", "field"), [
    ({"Outbox-Priority": "high"}, "headers.Outbox-Priority"),
    ({"Outbox-Scheduled-At": "tomorrow"}, "headers.Outbox-Scheduled-At"),
    ({"Outbox-Scheduled-At": "2026-12-24T09:00:00"}, "scheduled_at"),  # no time zone: the client refuses it
    ({"Outbox-Priorty": "5"}, "headers.Outbox-Priorty"),  # misspelt: refused rather than sent
    ({"Outbox-Dedupe-Key": ""}, "dedupe_key"),
    ({"To": "undisclosed-recipients:;"}, "headers.To"),  # a To header other than the recipients
    ({"Cc": "other@example.com"}, "headers.Cc"),
    ({"Reply-To": "a@example.com, b@example.com"}, "headers.Reply-To"),
    ({"Date": "Sat, 05 Dec 2026 09:00:00 +0000"}, "headers.Date"),  # the daemon writes Date and Message-ID
    ({"Message-ID": "<x@example.com>"}, "headers.Message-ID"),
])
def test_a_header_that_cannot_be_carried_is_refused_by_name(headers: dict[str, str], field: str) -> None:
    with pytest.raises(InvalidEmail) as refused:
        email_from_message(message(headers=headers))
    assert refused.value.field == field


def test_from_and_reply_to_headers_override_as_in_django_and_a_same_to_header_is_accepted() -> None:
    email = email_from_message(message(to=["zoe@example.com", "bob@example.com"], headers={
        "From": "Shop <noreply@example.com>", "Reply-To": "Help <help@example.com>",
        "To": "Bob <bob@example.com>, zoe@example.com"}))
    assert (email.from_address, email.reply_to, email.headers) == (
        "Shop <noreply@example.com>", "Help <help@example.com>", {})


def test_attachments_keep_their_bytes_and_a_text_one_is_encoded_in_the_message_s_encoding() -> None:
    m = message(attachments=[("terms.pdf", b"%PDF\x00\xff", "application/pdf")])
    m.encoding = "iso-8859-1"
    m.attach("note.txt", "café")  # type guessed from the name, as Django does
    m.attach(MIMEApplication(b"\x01\x02", "zip", Name="a.zip"))
    m.attachments[-1].add_header("Content-Disposition", "attachment", filename="a.zip")
    assert [(a.filename, a.content, a.content_type) for a in email_from_message(m).attachments] == [
        ("terms.pdf", b"%PDF\x00\xff", "application/pdf"), ("note.txt", "café".encode("latin-1"), "text/plain"),
        ("a.zip", b"\x01\x02", "application/zip")]


def test_a_text_attachment_defaults_to_the_utf_8_charset() -> None:
    [attachment] = email_from_message(message(attachments=[("n.csv", "zoë", "text/csv")])).attachments
    assert attachment.content == "zoë".encode()


@pytest.mark.parametrize("attachment", [
    (None, b"x", "application/octet-stream"),  # no filename
    ("fwd.eml", EmailMessage("s", "b", None, ["a@example.com"]), "message/rfc822"),
])
def test_an_attachment_that_cannot_be_carried_is_refused(attachment: tuple[object, object, str]) -> None:
    m = message()
    m.attachments.append(attachment)
    with pytest.raises(InvalidEmail) as refused:
        email_from_message(m)
    assert refused.value.field.startswith("attachments[0]")


def test_text_that_the_message_s_encoding_cannot_hold_is_refused_by_name() -> None:
    m = message(attachments=[("n.txt", "café", "text/plain")])
    m.encoding = "ascii"
    with pytest.raises(InvalidEmail) as refused:
        email_from_message(m)
    assert refused.value.field == "attachments[0].content"
    with pytest.raises(InvalidEmail) as refused:
        email_from_message(message(alternatives=[(b"<p>\xff</p>", "text/html")]))
    assert refused.value.field == "alternatives[0]"


def test_an_inline_part_with_a_content_id_becomes_an_inline_attachment() -> None:
    image = MIMEImage(PNG, "png")
    image.add_header("Content-ID", "<logo>")
    m = message(alternatives=[('<img src="cid:logo">', "text/html")])
    m.mixed_subtype = "related"
    m.attach(image)
    [attachment] = email_from_message(m).attachments
    assert (attachment.filename, attachment.content, attachment.content_type) == ("logo", PNG, "image/png")
    assert attachment.content_id == "logo"


def test_a_message_without_recipients_is_skipped_and_not_counted() -> None:
    assert EmailBackend().send_messages([EmailMessage("s", "b", None, [])]) == 0


def test_a_database_alias_that_is_not_postgresql_is_refused_at_start() -> None:
    with override_settings(OUTBOX_MAILER_DATABASE="sqlite"), pytest.raises(ImproperlyConfigured, match="sqlite"):
        EmailBackend()
    with override_settings(OUTBOX_MAILER_DATABASE="nowhere"), pytest.raises(ImproperlyConfigured, match="nowhere"):
        EmailBackend()


def test_importing_the_backend_imports_no_daemon_dependency() -> None:
    daemon = sorted(DAEMON_AND_DRIVERS)
    program = f"import sys, outbox_mailer.django; print(sorted({{m.split('.')[0] for m in sys.modules}} & {{*{daemon!r}}}), 'django' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.split() == ["[]", "True"]
