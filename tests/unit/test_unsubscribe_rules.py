"""One-click unsubscribe's rules outside the token: the settings, `check`'s warning about unsigned SMTP mail, the
client's Email field."""

from __future__ import annotations

from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from outbox_mailer.cli.setup_commands import unsubscribe_summary
from outbox_mailer.client import Email, InvalidEmail
from outbox_mailer.errors import ConfigurationError
from outbox_mailer.settings.config import load_settings
from tests.unit.test_dkim_signing import pem_of

KEYS = "0123456789abcdef-first,0123456789abcdef-second"
ON = {"unsubscribe": {"base_url": "https://mail.example.com/", "keys": KEYS}}
DKIM = {"dkim": {"domain": "example.com", "selector": "s1",
                 "private_key": pem_of(rsa.generate_private_key(public_exponent=65537, key_size=1024))}}


@pytest.mark.parametrize(("overrides", "warned"), [
    ({**ON}, True),
    ({**ON, **DKIM}, False),
    ({**ON, "smtp": {"host": "relay.example.com"}, "default_transport": "resend",
      "transports": {"resend": {"kind": "resend", "api_key": "re_x"}}}, True),  # the smtp transport is still there
])
def test_check_warns_when_unsubscribe_is_on_and_an_smtp_transport_sends_unsigned(
        overrides: dict[str, Any], warned: bool) -> None:
    summary = unsubscribe_summary(load_settings(**overrides))
    assert summary.startswith("links under https://mail.example.com/unsubscribe/, valid 365 days")
    assert ("WARNING" in summary and "DKIM" in summary) is warned


def test_check_says_when_unsubscribe_is_off() -> None:
    assert unsubscribe_summary(load_settings()).startswith("off: rows naming an unsubscribe_category fail")


@pytest.mark.parametrize("unsubscribe", [
    {"base_url": "http://mail.example.com", "keys": KEYS},  # mailbox providers POST to https only
    {"base_url": "https://mail.example.com/?a=1", "keys": KEYS},
    {"base_url": "https://mail.example.com"},
    {"keys": KEYS},
    {"base_url": "https://mail.example.com", "keys": "short"},
    {"base_url": "https://mail.example.com", "keys": "0123456789abcdef-first,short"},
    {"base_url": "https://mail.example.com", "keys": ","},
])
def test_unsubscribe_settings_are_refused_at_start_up_unless_https_with_long_enough_keys(
        unsubscribe: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError, match="UNSUBSCRIBE"):
        load_settings(unsubscribe=unsubscribe)


def test_the_first_key_signs_and_both_verify() -> None:
    both = load_settings(**ON).unsubscribe.signer()
    second = load_settings(unsubscribe={"base_url": "https://mail.example.com", "keys": KEYS.split(",")[1]}).unsubscribe.signer()
    assert both is not None and second is not None
    assert both.read(second.token(1, "a@example.com", "news", 20_000), 20_000) is not None
    assert second.read(both.token(1, "a@example.com", "news", 20_000), 20_000) is None, "the first key signs"


def test_the_client_writes_the_category_of_a_single_recipient_email() -> None:
    email = Email(dedupe_key="k", to=["zoe@example.com"], subject="s", text="t", unsubscribe_category="newsletter")
    assert email.row["unsubscribe_category"] == "newsletter"
    assert Email(dedupe_key="k", to=["zoe@example.com"], subject="s", text="t").row["unsubscribe_category"] is None


@pytest.mark.parametrize(("fields", "field"), [
    ({"cc": ["bob@example.com"]}, "unsubscribe_category"),
    ({"to": ["zoe@example.com", "bob@example.com"]}, "unsubscribe_category"),
    ({"unsubscribe_category": "News"}, "unsubscribe_category"),
    ({"unsubscribe_category": ""}, "unsubscribe_category"),
    ({"headers": {"List-Unsubscribe": "<https://x.example/u>"}}, "headers"),
])
def test_the_client_refuses_a_category_the_insert_would_refuse(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidEmail) as raised:
        Email(**{"dedupe_key": "k", "to": ["zoe@example.com"], "subject": "s", "text": "t",
                 "unsubscribe_category": "newsletter", **fields})
    assert raised.value.field == field
