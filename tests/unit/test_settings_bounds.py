"""Settings that used to be accepted at start-up and then broke at run time.

Every numeric setting has a finite range, checked when settings load; the
walk below finds the fields itself, so a new numeric setting without bounds
fails here.
"""

from __future__ import annotations

import os
import types
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

from outbox_mailer.errors import ConfigurationError
from outbox_mailer.settings.config import (
    ApiTransportSettings,
    PruneSettings,
    RetrySettings,
    Settings,
    SmtpSettings,
    load_settings,
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in list(os.environ):
        if key.startswith("OUTBOX_MAILER_") or key == "CREDENTIALS_DIRECTORY":
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)  # no stray .env


def _numeric_kind(annotation: object) -> type | None:
    """int or float when the field holds a number (optional or not), else None."""
    args = typing.get_args(annotation) if isinstance(annotation, types.UnionType) or typing.get_origin(
        annotation) is typing.Union else (annotation,)
    kinds = {a for a in args if a is not type(None)}
    if kinds == {bool} or not kinds <= {int, float}:
        return None
    return float if float in kinds else int


def _numeric_fields(model: type[BaseModel]) -> Iterator[tuple[str, type]]:
    for name, field in model.model_fields.items():
        kind = _numeric_kind(field.annotation)
        if kind is not None:
            yield name, kind


# Where each model lives in the environment, with what it needs besides the field under test.
MODELS: list[tuple[type[BaseModel], str, dict[str, str]]] = [
    (Settings, "OUTBOX_MAILER_", {}),
    (SmtpSettings, "OUTBOX_MAILER_SMTP__", {}),
    (SmtpSettings, "OUTBOX_MAILER_TRANSPORTS__RELAY__", {"OUTBOX_MAILER_TRANSPORTS__RELAY__KIND": "smtp"}),
    (ApiTransportSettings, "OUTBOX_MAILER_TRANSPORTS__API__", {"OUTBOX_MAILER_TRANSPORTS__API__KIND": "resend",
                                                               "OUTBOX_MAILER_TRANSPORTS__API__API_KEY": "re_x"}),
    (RetrySettings, "OUTBOX_MAILER_RETRY__", {}),
    (PruneSettings, "OUTBOX_MAILER_PRUNE__", {}),
]
CASES = [
    pytest.param(model, prefix + name.upper(), kind, needs, id=prefix + name.upper())
    for model, prefix, needs in MODELS
    for name, kind in _numeric_fields(model)
]
BAD_VALUES = ["inf", "-inf", "nan", "1e300", "-1", "1" + "0" * 30]


def test_the_walk_finds_the_numeric_settings() -> None:
    names = {case.id for case in CASES}
    assert {"OUTBOX_MAILER_PAUSE_MAX_SECONDS", "OUTBOX_MAILER_MAX_ATTEMPTS", "OUTBOX_MAILER_SMTP__PORT",
            "OUTBOX_MAILER_RETRY__BASE_SECONDS", "OUTBOX_MAILER_PRUNE__DELETE_AFTER_DAYS",
            "OUTBOX_MAILER_TRANSPORTS__API__TIMEOUT_SECONDS"} <= names
    assert len(names) >= 30


@pytest.mark.parametrize(("model", "variable", "kind", "needs"), CASES)
def test_every_numeric_setting_refuses_non_finite_huge_and_negative_values(
    monkeypatch: pytest.MonkeyPatch, model: type[BaseModel], variable: str, kind: type, needs: dict[str, str]
) -> None:
    for key, value in needs.items():
        monkeypatch.setenv(key, value)
    load_settings()  # the defaults are in range
    for bad in BAD_VALUES:
        monkeypatch.setenv(variable, bad)
        with pytest.raises(ConfigurationError) as info:
            load_settings()
        assert variable in str(info.value), (bad, str(info.value))
        assert info.value.setting == variable


@pytest.mark.parametrize(("model", "variable", "kind", "needs"), CASES)
def test_every_numeric_setting_documents_a_finite_upper_bound(
    model: type[BaseModel], variable: str, kind: type, needs: dict[str, str]
) -> None:
    name = variable.rsplit("__", 1)[-1].removeprefix("OUTBOX_MAILER_").lower()
    field = model.model_fields[name]
    uppers = [getattr(m, "le", None) or getattr(m, "lt", None) for m in field.metadata]
    assert any(u is not None for u in uppers), f"{variable} has no upper bound"


def test_a_huge_pause_is_refused_before_it_can_overflow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTBOX_MAILER_PAUSE_BASE_SECONDS", "1e12")
    monkeypatch.setenv("OUTBOX_MAILER_PAUSE_MAX_SECONDS", "1e12")
    with pytest.raises(ConfigurationError, match="OUTBOX_MAILER_PAUSE_BASE_SECONDS"):
        load_settings()


@pytest.mark.parametrize("value", ["noreply at example", "App <noreply@>", "a@b@c", "x\r\nBcc: y@example.com",
                                   "   "])
def test_default_from_is_parsed_like_a_row_s_from_address(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("OUTBOX_MAILER_DEFAULT_FROM", value)
    with pytest.raises(ConfigurationError) as info:
        load_settings()
    assert info.value.setting == "OUTBOX_MAILER_DEFAULT_FROM"


@pytest.mark.parametrize("value", ["App <app@example.com>", "app@example.com", '"Shop, Inc." <shop@example.com>',
                                   "Müller <m@bücher.example>"])
def test_good_default_from_is_kept_as_written(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("OUTBOX_MAILER_DEFAULT_FROM", value)
    assert load_settings().default_from == value


@pytest.mark.parametrize("value", ["bad name", "", "-leading.example", "trailing-.example", "a..b", "[1.2.3]",
                                   "[999.1.1.1]", "host.example.", "müller.example", "a" * 64 + ".example",
                                   "x\n", "under_score.example", "[IPv6:nonsense]"])
def test_helo_name_must_be_a_host_name_or_address_literal(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("OUTBOX_MAILER_SMTP__HELO_NAME", value)
    with pytest.raises(ConfigurationError) as info:
        load_settings()
    assert info.value.setting == "OUTBOX_MAILER_SMTP__HELO_NAME"


@pytest.mark.parametrize("value", ["mail.example.com", "localhost", "a1-b2", "[192.0.2.1]", "[IPv6:2001:db8::1]",
                                   "xn--mller-kva.example"])
def test_good_helo_names_are_accepted(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("OUTBOX_MAILER_SMTP__HELO_NAME", value)
    assert load_settings().smtp.helo_name == value


def test_helo_name_of_a_named_smtp_transport_is_checked_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTBOX_MAILER_TRANSPORTS__RELAY__KIND", "smtp")
    monkeypatch.setenv("OUTBOX_MAILER_TRANSPORTS__RELAY__HELO_NAME", "bad name")
    with pytest.raises(ConfigurationError) as info:
        load_settings()
    assert info.value.setting == "OUTBOX_MAILER_TRANSPORTS__RELAY__HELO_NAME"


@pytest.mark.parametrize("value", ["not a url", "mysql://u:p@h/db", "postgresql:/db", "localhost/db", "",
                                   "postgresql://user:pw d@host/db"])
def test_database_url_must_be_a_postgresql_url(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("OUTBOX_MAILER_DATABASE_URL", value)
    with pytest.raises(ConfigurationError) as info:
        load_settings()
    assert info.value.setting == "OUTBOX_MAILER_DATABASE_URL"
    if "pw d" in value:
        assert "pw d" not in str(info.value)  # the password is never echoed


@pytest.mark.parametrize("value", ["postgresql://u:p@db/app", "postgres://db/app", "postgresql:///app?host=/run/pg",
                                   "postgresql://h1:5432,h2:5432/app"])
def test_postgresql_urls_are_accepted(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("OUTBOX_MAILER_DATABASE_URL", value)
    assert load_settings().require_database_url() == value


def test_a_nested_setting_given_as_bad_json_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTBOX_MAILER_SMTP", "notjson")
    with pytest.raises(ConfigurationError) as info:
        load_settings()
    assert info.value.setting == "OUTBOX_MAILER_SMTP"
    assert "OUTBOX_MAILER_SMTP" in str(info.value) and "JSON" in str(info.value)


def test_a_dotenv_file_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    (tmp_path / ".env").write_bytes(b"OUTBOX_MAILER_BATCH_SIZE=\xff\xfe\n")
    with pytest.raises(ConfigurationError) as info:
        load_settings()
    assert ".env" in str(info.value) and "UTF-8" in str(info.value)


def test_a_secret_file_that_is_not_utf8_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "smtp__password").write_bytes(b"\xff\xfe")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    monkeypatch.setenv("OUTBOX_MAILER_SMTP__USERNAME", "u")
    with pytest.raises(ConfigurationError) as info:
        load_settings()
    assert "smtp__password" in str(info.value) and "UTF-8" in str(info.value)
