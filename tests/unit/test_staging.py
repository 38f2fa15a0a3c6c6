"""The staging guard: which rows it lets through, what a redirect sends, and every bad setting."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from outbox_mailer.delivery import Delivery, OutcomeKind
from outbox_mailer.errors import ConfigurationError
from outbox_mailer.message.staging import StagingGuard, allowed_patterns
from outbox_mailer.settings.config import load_settings

NOW = datetime(2026, 12, 2, tzinfo=UTC)


def row(to: tuple[str, ...] = ("a@example.com",), cc: tuple[str, ...] = (), bcc: tuple[str, ...] = (),
        **kw: Any) -> Delivery:
    fields: dict[str, Any] = dict(
        id=1, dedupe_key="k", claim_token=uuid.UUID(int=1), attempts=1, max_attempts=None, from_address=None,
        to_addresses=to, cc_addresses=cc, bcc_addresses=bcc, reply_to=None, subject="s", text_body="b",
        html_body=None, headers={}, attachments=[], metadata={}, transport=None, priority=0, scheduled_at=NOW,
        expires_at=None, created_at=NOW)
    fields.update(kw)
    return Delivery(**fields)


ALLOW = StagingGuard(allowed=allowed_patterns("qa@shop.example, @corp.example, @*.staging.example"))


@pytest.mark.parametrize("address", [
    "qa@shop.example", "QA <Qa@Shop.EXAMPLE>", "anyone@corp.example", "Dev <x@Corp.Example>",
    "x@a.staging.example", "x@deep.a.staging.example",
])
def test_allowed_recipients_pass_untouched(address: str) -> None:
    delivery = row(to=(address,), cc=("anyone@corp.example",), bcc=("qa@shop.example",))
    guarded = ALLOW.apply(delivery)
    assert guarded.refusal is None and guarded.delivery is delivery and guarded.notes == ()


@pytest.mark.parametrize("address", [
    "customer@gmail.example", "qa@shop.example.evil", "x@staging.example",  # @*. is below the domain only
    "x@notcorp.example", "x@corp.example.net", "not an address",
])
def test_a_row_with_any_recipient_outside_the_list_fails_whole_naming_the_setting_and_addresses(address: str) -> None:
    for delivery in (row(to=(address,)), row(to=("qa@shop.example",), cc=(address,)),
                     row(to=("qa@shop.example",), bcc=(address, "Other <Other@Gmail.example>"))):
        refusal = ALLOW.apply(delivery).refusal
        assert refusal is not None and refusal.kind is OutcomeKind.PERMANENT
        assert refusal.error is not None and refusal.error.startswith("not in OUTBOX_MAILER_ALLOWED_RECIPIENTS: ")
        assert address.lower() in refusal.error or address in refusal.error


def test_an_internationalised_domain_matches_in_either_form() -> None:
    guard = StagingGuard(allowed=allowed_patterns("@xn--mller-kva.example"))
    assert guard.apply(row(to=("zoë@müller.example",))).refusal is None
    assert guard.apply(row(to=("z@xn--mller-kva.example",))).refusal is None


def test_redirect_sends_to_one_address_with_the_originals_in_a_header_and_bcc_on_the_attempt() -> None:
    guard = StagingGuard(redirect_to="QA <qa@shop.example>")
    delivery = row(to=("Zoë <zoe@example.com>", "b@example.com"), cc=("c@example.com",), bcc=("secret@example.com",),
                   headers={"x-original-to": "forged", "X-Campaign": "r"}, retry_recipients=("b@example.com",),
                   subject="Your receipt")
    guarded = guard.apply(delivery)
    d = guarded.delivery
    assert guarded.refusal is None
    assert (d.to_addresses, d.cc_addresses, d.bcc_addresses, d.retry_recipients) == (
        ("QA <qa@shop.example>",), (), (), None)
    assert d.headers == {"X-Campaign": "r", "X-Original-To": "Zoë <zoe@example.com>, b@example.com, c@example.com"}
    assert d.subject == "Your receipt"
    assert "secret" not in str(d.headers)
    [note] = guarded.notes
    assert note.address == "secret@example.com" and "OUTBOX_MAILER_REDIRECT_TO" in note.message


@pytest.mark.parametrize(("env", "message"), [
    ({"OUTBOX_MAILER_ALLOWED_RECIPIENTS": ""}, "an empty entry"),
    ({"OUTBOX_MAILER_ALLOWED_RECIPIENTS": "a@example.com,,b@example.com"}, "an empty entry"),
    ({"OUTBOX_MAILER_ALLOWED_RECIPIENTS": "@"}, "is not a domain name"),
    ({"OUTBOX_MAILER_ALLOWED_RECIPIENTS": "@*."}, "is not a domain name"),
    ({"OUTBOX_MAILER_ALLOWED_RECIPIENTS": "@a..example"}, "is not a domain name"),
    ({"OUTBOX_MAILER_ALLOWED_RECIPIENTS": "@*.*.example"}, "is not a domain name"),
    ({"OUTBOX_MAILER_ALLOWED_RECIPIENTS": "nobody"}, "is not an address"),
    ({"OUTBOX_MAILER_ALLOWED_RECIPIENTS": "Bob <b@example.com>"}, "without a display name"),
    ({"OUTBOX_MAILER_REDIRECT_TO": "not an address"}, "is not an address mail can be sent to"),
    ({"OUTBOX_MAILER_REDIRECT_TO": "qa@shop.example\r\nBcc: x@example.com"}, "is not an address mail can be sent to"),
    ({"OUTBOX_MAILER_REDIRECT_TO": "qa@example.com", "OUTBOX_MAILER_ALLOWED_RECIPIENTS": "@example.com"},
     "are both set"),
])
def test_bad_guard_settings_are_refused_naming_the_setting(monkeypatch: pytest.MonkeyPatch, env: dict[str, str],
                                                           message: str) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError) as exc:
        load_settings(database_url="postgresql://u@127.0.0.1:1/db")
    assert message in str(exc.value)
    assert any(name in str(exc.value) for name in env)
