"""A variable, .env entry or credential file that names no setting is refused, with the closest
known name (settings/names.py); every name the docs and examples use is known."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from outbox_mailer.errors import ConfigurationError
from outbox_mailer.settings.config import load_settings

ROOT = Path(__file__).resolve().parents[2]
URL = "postgresql://u@127.0.0.1:1/db"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import os

    for key in list(os.environ):
        if key.upper().startswith("OUTBOX_MAILER_") or key == "CREDENTIALS_DIRECTORY":
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)  # no .env of the checkout
    monkeypatch.setenv("OUTBOX_MAILER_DATABASE_URL", URL)


def refused(monkeypatch: pytest.MonkeyPatch, name: str, value: str = "x") -> str:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError) as exc:
        load_settings()
    return str(exc.value)


def test_a_misspelt_password_is_refused_with_the_setting_it_meant(monkeypatch: pytest.MonkeyPatch) -> None:
    message = refused(monkeypatch, "OUTBOX_MAILER_SMTP__PASWORD", "hunter2")
    assert "not a setting: OUTBOX_MAILER_SMTP__PASWORD (did you mean OUTBOX_MAILER_SMTP__PASSWORD?)" in message
    assert "hunter2" not in message


@pytest.mark.parametrize(("name", "meant"), [
    ("OUTBOX_MAILER_TRANSPORTS__RESEND__API_KY", "OUTBOX_MAILER_TRANSPORTS__RESEND__API_KEY"),
    ("OUTBOX_MAILER_CONCURENCY", "OUTBOX_MAILER_CONCURRENCY"),
    ("OUTBOX_MAILER_WEBHOOKS__RESEND__SECRT", "OUTBOX_MAILER_WEBHOOKS__RESEND__SECRET"),
    ("OUTBOX_MAILER_SMTP__DAILY_LIMT", "OUTBOX_MAILER_SMTP__DAILY_LIMIT"),
])
def test_typos_name_the_closest_setting(monkeypatch: pytest.MonkeyPatch, name: str, meant: str) -> None:
    assert f"{name} (did you mean {meant}?)" in refused(monkeypatch, name)


def test_a_name_like_no_setting_is_refused_without_a_guess(monkeypatch: pytest.MonkeyPatch) -> None:
    message = refused(monkeypatch, "OUTBOX_MAILER_XYZZY")
    assert "not a setting: OUTBOX_MAILER_XYZZY (fix the name, or remove it)" in message


@pytest.mark.parametrize("name", [
    "OUTBOX_MAILER_TRANSPORTS__RESEND__KIND", "OUTBOX_MAILER_WEBHOOKS__SES__TOPIC_ARNS",
    "outbox_mailer_concurrency", "OUTBOX_MAILER_TEST_DATABASE_URL", "OUTBOX_MAILER_PRUNE__INTERVAL_SECONDS",
])
def test_known_names_pass(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    values = {"OUTBOX_MAILER_TRANSPORTS__RESEND__KIND": "resend", "outbox_mailer_concurrency": "4",
              "OUTBOX_MAILER_PRUNE__INTERVAL_SECONDS": "60"}
    if name.startswith("OUTBOX_MAILER_TRANSPORTS__RESEND"):
        monkeypatch.setenv("OUTBOX_MAILER_TRANSPORTS__RESEND__API_KEY", "k")
    monkeypatch.setenv(name, values.get(name, "arn:aws:sns:eu-west-1:123456789012:t"))
    load_settings()


def test_a_misnamed_credential_file_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    secrets = tmp_path / "credentials"
    secrets.mkdir()
    (secrets / "smtp__pasword").write_text("hunter2")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(secrets))
    with pytest.raises(ConfigurationError) as exc:
        load_settings()
    assert f"credential file {secrets / 'smtp__pasword'} (did you mean 'smtp__password'?)" in str(exc.value)
    (secrets / "smtp__pasword").rename(secrets / "smtp__password")
    (secrets / "smtp__username").write_text("mailer")
    assert load_settings().smtp.password is not None


def test_a_misspelt_entry_in_dot_env_is_refused(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("OUTBOX_MAILER_MAX_ATEMPTS=3\n")
    with pytest.raises(ConfigurationError) as exc:
        load_settings()
    assert "OUTBOX_MAILER_MAX_ATEMPTS (did you mean OUTBOX_MAILER_MAX_ATTEMPTS?)" in str(exc.value)


def test_every_name_the_docs_and_examples_use_is_known(monkeypatch: pytest.MonkeyPatch) -> None:
    from outbox_mailer.settings.config import (
        ApiTransportSettings,
        Settings,
        SmtpTransportSettings,
    )
    from outbox_mailer.settings.names import SettingNames

    names = SettingNames(Settings, [SmtpTransportSettings, ApiTransportSettings])
    files = [ROOT / "README.md", *ROOT.glob("docs/*.md"), ROOT / "systemd" / "outbox-mailer.env.example",
             *ROOT.glob("systemd/*.service"), *ROOT.glob("examples/**/*.*")]
    used = {m for f in files if f.is_file() for m in re.findall(r"OUTBOX_MAILER_[A-Z0-9_]+", f.read_text("utf-8"))}
    used = {u for u in used if not u.endswith("_")}  # "OUTBOX_MAILER_TRANSPORTS__<NAME>__...", prefixes
    used -= {"OUTBOX_MAILER_SMTP__PASWORD"}  # the docs' example of a typo
    used -= {"OUTBOX_MAILER_DATABASE"}  # a Django setting of the email backend (docs/django.md), not the daemon's
    assert len(used) > 50
    assert [u for u in sorted(used) if not names.known(u.removeprefix("OUTBOX_MAILER_"))] == []
