"""outbox_mailer.client's Email value: parsed on construction, each bad input refused naming its field."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from outbox_mailer.client import Attachment, Email, InvalidEmail
from outbox_mailer.errors import OutboxMailerError

WHEN = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)


def email(**fields: Any) -> Email:
    values: dict[str, Any] = {"dedupe_key": "order-1", "to": ["ann@example.com"], "subject": "Hello",
                              "text": "Hi Ann"}
    values.update(fields)
    return Email(**values)


def refusal(**fields: Any) -> InvalidEmail:
    with pytest.raises(InvalidEmail) as caught:
        email(**fields)
    return caught.value


def test_a_valid_email_keeps_every_value_as_given() -> None:
    e = email(to=["Ann <ann@example.com>", "bob@example.com"], cc=["c@example.com"], bcc=["d@example.com"],
              html="<p>Hi</p>", reply_to="help@example.com", from_address="Shop <shop@example.com>",
              headers={"X-Campaign": "winter"}, attachments=[Attachment("a.pdf", b"%PDF", "application/pdf")],
              metadata={"order": 1, "tags": ["a", None, True, 1.5]}, transport="resend", priority=-3,
              scheduled_at=WHEN, expires_at=WHEN + timedelta(days=1), max_attempts=7, ignore_suppressions=True)
    assert e.to == ("Ann <ann@example.com>", "bob@example.com")
    assert e.cc == ("c@example.com",) and e.bcc == ("d@example.com",)
    assert e.headers == {"X-Campaign": "winter"}
    assert e.attachments == (Attachment("a.pdf", b"%PDF", "application/pdf"),)
    assert (e.priority, e.max_attempts, e.ignore_suppressions, e.scheduled_at) == (-3, 7, True, WHEN)


def test_one_address_given_as_a_string_is_a_list_of_one() -> None:
    assert email(to="ann@example.com", cc="c@example.com").to == ("ann@example.com",)


def test_an_invalid_email_is_a_value_error_of_the_package() -> None:
    error = refusal(to=[])
    assert isinstance(error, ValueError) and isinstance(error, OutboxMailerError)


@pytest.mark.parametrize(("fields", "field", "words"), [
    ({"to": ["ann@example.com", "not an address"]}, "to[1]", "invalid address"),
    ({"to": []}, "to", "at least one recipient"),
    ({"cc": ["x@example.com\r\nBcc: y@example.com"]}, "cc[0]", "control character"),
    ({"bcc": [3]}, "bcc[0]", "expected a string"),
    ({"reply_to": "nobody"}, "reply_to", "invalid address"),
    ({"from_address": "Shop <shop@example.com"}, "from_address", "angle brackets"),
    ({"headers": {"X-Campaign": "a\r\nBcc: evil@example.com"}}, "headers.X-Campaign", "control character"),
    ({"headers": {"X Bad": "v"}}, "headers", "invalid header name"),
    ({"headers": {"From": "a@example.com"}}, "headers.From", "set by outbox-mailer"),
    ({"headers": {"X-Count": 3}}, "headers.X-Count", "expected a string"),
    ({"attachments": [Attachment("", b"x", "text/plain")]}, "attachments[0].filename", "1-255 characters"),
    ({"attachments": [Attachment("a\nb.txt", b"x", "text/plain")]}, "attachments[0].filename", "control"),
    ({"attachments": [Attachment("a.txt", "text", "text/plain")]}, "attachments[0].content", "bytes"),
    ({"attachments": [Attachment("a.txt", b"x", "plain")]}, "attachments[0].content_type", "type/subtype"),
    ({"attachments": [{"filename": "a.txt"}]}, "attachments[0]", "an Attachment"),
    ({"subject": "Hi\nthere"}, "subject", "control character"),
    ({"subject": None}, "subject", "expected a string"),
    ({"text": None}, "text", "text, html or both"),
    ({"text": "a\x00b"}, "text", "NUL"),
    ({"html": "\ud800"}, "html", "not valid Unicode"),
    ({"dedupe_key": ""}, "dedupe_key", "may not be empty"),
    ({"dedupe_key": "k" * 256}, "dedupe_key", "at most 255 characters"),
    ({"dedupe_key": "a\tb"}, "dedupe_key", "control character"),
    ({"transport": ""}, "transport", "1-64 characters"),
    ({"transport": "t" * 65}, "transport", "1-64 characters"),
    ({"priority": 40_000}, "priority", "-32768..32767"),
    ({"priority": True}, "priority", "a whole number"),
    ({"max_attempts": 0}, "max_attempts", "1..2147483647"),
    ({"max_attempts": 2.0}, "max_attempts", "a whole number"),
    ({"ignore_suppressions": 1}, "ignore_suppressions", "True or False"),
    ({"scheduled_at": datetime(2030, 1, 2)}, "scheduled_at", "time zone"),
    ({"scheduled_at": "2030-01-02T00:00:00+00:00"}, "scheduled_at", "a datetime"),
    ({"expires_at": datetime(1899, 12, 31, tzinfo=UTC)}, "expires_at", "1900"),
    ({"scheduled_at": datetime(9999, 1, 1, tzinfo=UTC)}, "scheduled_at", "9999"),
    ({"metadata": [1]}, "metadata", "expected a dict"),
    ({"metadata": {"x": math.nan}}, "metadata.x", "finite"),
    ({"metadata": {"x": 1e301}}, "metadata.x", "1e300"),
    ({"metadata": {"x": {1, 2}}}, "metadata.x", "JSON"),
    ({"metadata": {1: "x"}}, "metadata", "keys must be strings"),
    ({"metadata": {"x": "a\x00"}}, "metadata.x", "NUL"),
    ({"template": "welcome"}, "template", "not both (subject is given)"),
    ({"template_data": {"name": "Ann"}}, "template_data", "only with a template"),
    ({"locale": "fr"}, "locale", "only with a template"),
    ({"subject": None, "text": None, "template": "w", "locale": "pt_BR"}, "locale", "like en or pt-BR"),
    ({"subject": None, "text": None, "template": "w", "template_data": [1]}, "template_data", "expected a dict"),
    ({"subject": None, "text": None, "template": "w", "template_data": {"x": math.inf}}, "template_data.x",
     "finite"),
    ({"provider_template": "welcome-v2"}, "provider_template", "not both (subject is given)"),
    ({"subject": None, "text": None, "template": "w", "provider_template": "p"}, "provider_template",
     "a stored template or a provider's template, not both"),
    ({"subject": None, "text": None, "provider_template": "p", "locale": "en"}, "locale", "only with a stored template"),
    ({"subject": None, "text": None, "provider_template": ""}, "provider_template", "1-255 characters"),
])
def test_each_bad_input_is_refused_naming_its_field(fields: dict[str, Any], field: str, words: str) -> None:
    error = refusal(**fields)
    assert error.field == field
    assert str(error).startswith(f"{field}: ")
    assert words in error.reason


def test_metadata_nested_as_deep_as_the_table_allows_is_kept_and_one_level_more_is_refused() -> None:
    def nested(levels: int) -> dict[str, Any]:
        value: Any = 1
        for _ in range(levels):
            value = {"a": value}
        return value  # type: ignore[no-any-return]

    assert email(metadata=nested(32)).metadata == nested(32)  # the value 1 is 32 levels down
    assert "32 levels" in refusal(metadata=nested(33)).reason


def test_an_offset_other_than_utc_is_kept() -> None:
    paris = timezone(timedelta(hours=1))
    assert email(scheduled_at=datetime(2030, 1, 1, 12, tzinfo=paris)).scheduled_at == WHEN.replace(
        month=1, day=1, hour=11, minute=0, second=0)


def test_an_email_cannot_be_changed_after_it_was_checked() -> None:
    e = email()
    with pytest.raises(AttributeError):
        e.subject = "Hi\r\nBcc: evil@example.com"  # type: ignore[misc]


def test_a_special_use_domain_is_left_to_the_daemon_and_an_invalid_one_refused() -> None:
    # whether mail may go to `.local` is the daemon's setting (OUTBOX_MAILER_ALLOW_SPECIAL_USE_DOMAINS), decided
    # when it composes; `.invalid` can never be delivered, whatever a daemon allows
    assert email(to=["ops@build.local"]).to == ("ops@build.local",)
    with pytest.raises(InvalidEmail, match=r"to\[0\]"):
        email(to=["ops@build.invalid"])


def test_an_inline_attachment_carries_its_content_id_and_a_bad_one_is_refused_by_name() -> None:
    logo = Attachment("logo.png", b"\x89PNG", "image/png", content_id="logo@shop")
    e = email(html='<img src="cid:logo@shop">', attachments=[logo])
    assert e.attachments[0].content_id == "logo@shop"
    with pytest.raises(InvalidEmail, match=r"attachments\[0\]\.content_id"):
        email(attachments=[Attachment("logo.png", b"x", "image/png", content_id="<logo@shop>")])


def test_an_email_naming_a_template_becomes_a_row_without_subject_or_body() -> None:
    row = Email(dedupe_key="k", to=["ann@example.com"], template="welcome", template_data={"name": "Ann"},
                locale="pt-BR").row
    assert (row["subject"], row["text_body"], row["html_body"]) == (None, None, None)
    assert (row["template"], row["template_data"], row["locale"]) == ("welcome", {"name": "Ann"}, "pt-BR")
    assert Email(dedupe_key="k", to=["ann@example.com"], template="welcome").row["template_data"] == {}


def test_an_email_naming_a_provider_template_becomes_a_row_with_its_model_and_no_subject_or_body() -> None:
    row = Email(dedupe_key="k", to=["ann@example.com"], provider_template="welcome-v2",
                template_data={"name": "Ann"}).row
    assert (row["subject"], row["text_body"], row["html_body"], row["template"]) == (None, None, None, None)
    assert (row["provider_template"], row["template_data"], row["locale"]) == ("welcome-v2", {"name": "Ann"}, None)
    assert Email(dedupe_key="k", to=["ann@example.com"], template="w").row["provider_template"] is None
