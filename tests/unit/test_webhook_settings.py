"""Webhook settings that could only fail at the first request are refused when they are read."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from outbox_mailer.settings.config import Settings


@pytest.mark.parametrize(("webhooks", "words"), [
    ({"sendgrid": {"public_key": "not a key"}}, "not a public key"),
    ({"mailgun": {"signing_key": "  "}}, "empty"),
    ({"postmark": {"username": "", "password": "x"}}, "must not be empty"),
    ({"postmark": {"username": "u"}}, "both USERNAME and PASSWORD"),
    ({"resend": {"secret": "abc"}}, "whsec_"),
    ({"ses": {"topic_arns": "arn:aws:sns:eu-west-1:123:short"}}, "not an SNS topic ARN"),
    ({"address": "nowhere"}, "expected host:port"),
])
def test_a_webhook_setting_that_cannot_work_is_refused_at_start_up(webhooks: dict, words: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValidationError, match=words):
        Settings(webhooks=webhooks)


def test_each_provider_is_on_only_when_its_secret_is_set() -> None:
    s = Settings(webhooks={"resend": {"secret": "whsec_abc"}, "ses": {
        "topic_arns": "arn:aws:sns:eu-west-1:123456789012:a, arn:aws:sns:eu-west-1:123456789012:b"}})
    assert s.webhooks.enabled() == ["resend", "ses"]
    assert s.webhooks.ses.arns() == {"arn:aws:sns:eu-west-1:123456789012:a", "arn:aws:sns:eu-west-1:123456789012:b"}


def test_loading_the_settings_imports_neither_cryptography_nor_jinja2() -> None:
    # every command loads the settings; cryptography (~50 ms) is for the receiver's signature checks only,
    # jinja2 for the commands that render templates
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", "import sys, outbox_mailer.settings.config; "
                          "print('cryptography' in sys.modules, 'jinja2' in sys.modules)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"
