"""Settings: names, defaults, cross-field rules, secrets from files, redaction."""

from __future__ import annotations

from pathlib import Path

import pytest

from outbox_mailer.errors import ConfigurationError
from outbox_mailer.settings.config import load_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("OUTBOX_MAILER_") or key == "CREDENTIALS_DIRECTORY":
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)  # no stray .env


def test_defaults() -> None:
    s = load_settings()
    assert (s.smtp.tls, s.smtp.effective_port, s.max_attempts, s.concurrency, s.batch_size) == ("starttls", 587, 8, 16, 100)
    assert s.effective_rescue_after_seconds == s.smtp.send_timeout_seconds + 15


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"OUTBOX_MAILER_SMTP__PORT": "x"}, "OUTBOX_MAILER_SMTP__PORT"),
        ({"OUTBOX_MAILER_BATCH_SIZE": "0"}, "OUTBOX_MAILER_BATCH_SIZE"),
        ({"OUTBOX_MAILER_IN_DOUBT": "maybe"}, "OUTBOX_MAILER_IN_DOUBT"),
        ({"OUTBOX_MAILER_SMTP__TLS": "none", "OUTBOX_MAILER_SMTP__USERNAME": "u",
          "OUTBOX_MAILER_SMTP__PASSWORD": "p"}, "clear text"),
        ({"OUTBOX_MAILER_SMTP__USERNAME": "u"}, "set together"),
        ({"OUTBOX_MAILER_RESCUE_AFTER_SECONDS": "30"}, "must exceed the longest send timeout"),
        ({"OUTBOX_MAILER_RETRY__BASE_SECONDS": "100", "OUTBOX_MAILER_RETRY__MAX_SECONDS": "10"}, "base_seconds"),
        ({"OUTBOX_MAILER_DEFAULT_TRANSPORT": "nope"}, "default_transport 'nope' is not configured"),
        ({"OUTBOX_MAILER_TRANSPORTS__X__KIND": "resend"}, "OUTBOX_MAILER_TRANSPORTS__X"),
        ({"OUTBOX_MAILER_TRANSPORTS__X__KIND": "carrier-pigeon"}, "OUTBOX_MAILER_TRANSPORTS__X"),
        ({"OUTBOX_MAILER_SMTP__IDEMPOTENCY_HEADER": "Bad Header:"}, "not a valid header name"),
        ({"OUTBOX_MAILER_PRUNE__SCRUB_AFTER_DAYS": "40", "OUTBOX_MAILER_PRUNE__DELETE_AFTER_DAYS": "10"},
         "delete_after_days"),
    ],
)
def test_bad_configuration_names_the_problem(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], named: str) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigurationError) as info:
        load_settings()
    assert named in str(info.value)


def test_nested_secrets_come_from_credential_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "smtp__password").write_text("hunter2")
    (creds / "database_url").write_text("postgresql://mailer:s3cret@db/app")
    (creds / "transports__resend__api_key").write_text("re_123")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    monkeypatch.setenv("OUTBOX_MAILER_SMTP__USERNAME", "mailer")
    monkeypatch.setenv("OUTBOX_MAILER_TRANSPORTS__RESEND__KIND", "resend")
    s = load_settings()
    assert s.smtp.password is not None and s.smtp.password.get_secret_value() == "hunter2"
    assert s.transports["resend"].api_key.get_secret_value() == "re_123"  # type: ignore[union-attr]
    shown = str(s.redacted())
    assert "hunter2" not in shown and "s3cret" not in shown and "re_123" not in shown
    assert s.redacted()["database_url"] == "postgresql://mailer:**********@db/app"


def test_missing_secrets_directory_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTBOX_MAILER_SECRETS_DIR", "/nonexistent/dir")
    with pytest.raises(ConfigurationError, match="does not exist"):
        load_settings()


def test_named_transports_and_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTBOX_MAILER_TRANSPORTS__CRM__KIND", "http")
    monkeypatch.setenv("OUTBOX_MAILER_TRANSPORTS__CRM__URL", "https://crm.example.com/mail")
    monkeypatch.setenv("OUTBOX_MAILER_TRANSPORTS__CRM__TIMEOUT_SECONDS", "90")
    monkeypatch.setenv("OUTBOX_MAILER_DEFAULT_TRANSPORT", "crm")
    s = load_settings()
    assert set(s.all_transports()) == {"smtp", "crm"} and s.default_transport == "crm"
    assert s.effective_rescue_after_seconds == 105  # the longest send timeout (90) + 15
