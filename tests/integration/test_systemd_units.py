"""The unit files under systemd's own checkers, and the example environment file against
the settings it documents.

``systemd-analyze verify`` fails when ExecStart's binary is missing, so each unit is
checked as a copy whose ExecStart points at this environment's ``outbox-mailer``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, SecretStr

from outbox_mailer.settings.config import Settings
from outbox_mailer.settings.transports import ApiTransportSettings, SmtpSettings

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "systemd"
INSTALLED_EXEC = "/opt/outbox-mailer/venv/bin/outbox-mailer run"
MAX_EXPOSURE = 2.0

needs_systemd_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                                           reason="systemd-analyze is not installed (Debian package systemd)")


def directives(path: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            key, _, value = line.partition("=")
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def checkable_copy(unit: str, directory: Path) -> Path:
    """The unit, named as systemd would load it, with ExecStart pointing at a binary that exists here."""
    text = (UNITS / unit).read_text()
    verb = next((v for v in ("webhooks", "console") if v in unit), "run")
    installed = INSTALLED_EXEC.replace(" run", f" {verb}")
    assert text.count(f"ExecStart={installed}\n") == 1
    script = Path(sys.executable).parent / "outbox-mailer"
    command = f"{script} {verb}" if script.exists() else f"{sys.executable} -m outbox_mailer {verb}"
    name = unit.replace("@.", "@checked.")  # a template is verified as one of its instances
    copy = directory / name
    copy.write_text(text.replace(f"ExecStart={installed}", f"ExecStart={command}"))
    return copy


ALL_UNITS = ["outbox-mailer.service", "outbox-mailer@.service", "outbox-mailer-webhooks.service",
             "outbox-mailer-console.service"]


@needs_systemd_analyze
@pytest.mark.parametrize("unit", ALL_UNITS)
def test_systemd_analyze_verify_is_silent(unit: str, tmp_path: Path) -> None:
    copy = checkable_copy(unit, tmp_path)
    result = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True, text=True, timeout=60,
                            check=False, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr


@needs_systemd_analyze
@pytest.mark.parametrize("unit", ALL_UNITS)
def test_security_exposure_is_low(unit: str, tmp_path: Path) -> None:
    copy = checkable_copy(unit, tmp_path)
    result = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", f"--threshold={int(MAX_EXPOSURE * 10)}", "--no-pager",
         str(copy)],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
    )
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout)
    assert match, result.stdout + result.stderr
    exposure = float(match.group(1))
    print(f"{unit}: exposure {exposure}")
    assert exposure <= MAX_EXPOSURE, result.stdout
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("unit", ["outbox-mailer.service", "outbox-mailer@.service"])
def test_unit_contract(unit: str) -> None:
    d = directives(UNITS / unit)
    single = {k: v[-1] for k, v in d.items()}
    assert single["Type"] == "notify" and single["NotifyAccess"] == "main"
    assert single["ExecStart"] == INSTALLED_EXEC
    assert "-/etc/outbox-mailer/outbox-mailer.env" in d["EnvironmentFile"]
    assert single["DynamicUser"] == "yes"
    assert single["Restart"] == "on-failure" and single["RestartSec"] == "2"
    assert single["KillSignal"] == "SIGTERM"
    assert int(single["WatchdogSec"]) == 30
    grace = Settings.model_fields["shutdown_grace_seconds"].default
    assert int(single["TimeoutStopSec"]) > grace + 10, "stop timeout must outlast the drain grace period"
    # the content held (its bound: docs/configuration.md, "Rows held in memory"), three more copies of each
    # row being sent (decoded attachments, composed message, what goes on the wire: one per SMTP
    # connection), and the process itself, under the soft cap (bench/held_memory.py measures it)
    limit = Settings.model_fields["max_message_bytes"].default
    held_bytes = (2 * Settings.model_fields["concurrency"].default + 1) * limit
    sending_copies = 3 * SmtpSettings.model_fields["pool_size"].default * limit
    assert single["MemoryMax"] == "1G" and single["MemoryHigh"] == "768M"
    assert held_bytes + sending_copies + 50 * 2**20 < 768 * 2**20
    for key, value in {"ProtectSystem": "strict", "ProtectHome": "yes", "NoNewPrivileges": "yes",
                       "PrivateTmp": "yes", "PrivateDevices": "yes", "CapabilityBoundingSet": "",
                       "SystemCallFilter": "@system-service", "SystemCallArchitectures": "native",
                       "MemoryDenyWriteExecute": "yes", "ProtectProc": "invisible", "UMask": "0077",
                       "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX", "LockPersonality": "yes",
                       "RestrictNamespaces": "yes", "RestrictRealtime": "yes", "RestrictSUIDSGID": "yes",
                       "ProtectKernelTunables": "yes", "ProtectKernelModules": "yes", "ProtectKernelLogs": "yes",
                       "ProtectControlGroups": "yes", "ProtectClock": "yes", "ProtectHostname": "yes"}.items():
        assert value in d.get(key, []), f"{key}={value}"
    if unit.startswith("outbox-mailer@"):
        assert "-/etc/outbox-mailer/%i.env" in d["EnvironmentFile"]
        assert d["EnvironmentFile"].index("-/etc/outbox-mailer/%i.env") > d["EnvironmentFile"].index(
            "-/etc/outbox-mailer/outbox-mailer.env"), "the instance's file must win"
        assert "OUTBOX_MAILER_WORKER_NAME=%H:%i" in d["Environment"]


def setting_at(path: list[str]) -> Any:
    """The field a credential or variable name leads to (``smtp__password`` -> SmtpSettings.password)."""
    model: type[BaseModel] = Settings
    field = None
    while path:
        name = path.pop(0)
        if field is not None and getattr(field.annotation, "__origin__", None) is dict:
            model = ApiTransportSettings  # transports__<name>__...: a provider transport
            name = path.pop(0)
        field = model.model_fields[name]
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
    return field


@pytest.mark.parametrize("unit", ["outbox-mailer.service", "outbox-mailer@.service"])
def test_every_credential_names_a_secret_setting(unit: str) -> None:
    ids = [value.partition(":")[0] for value in directives(UNITS / unit)["LoadCredential"]]
    assert {"database_url", "smtp__password"} <= set(ids)
    for credential in ids:
        field = setting_at(credential.split("__"))
        assert "SecretStr" in str(field.annotation), f"{credential} is not a secret setting"
    sources = [value.partition(":")[2] for value in directives(UNITS / unit)["LoadCredential"]]
    for source in sources:  # looked up in /etc/credstore etc.; a missing one is skipped
        assert not source.startswith("/"), source


@pytest.mark.parametrize("verb", ["webhooks", "console"])
def test_the_receiver_and_console_units_are_sandboxed_like_the_daemon_and_load_only_secrets(verb: str) -> None:
    hook, daemon = directives(UNITS / f"outbox-mailer-{verb}.service"), directives(UNITS / "outbox-mailer.service")
    assert hook["ExecStart"] == [f"/opt/outbox-mailer/venv/bin/outbox-mailer {verb}"]
    assert hook["Type"] == ["notify"] and hook["RestartPreventExitStatus"] == ["2"]
    sandbox = ("DynamicUser", "ProtectSystem", "ProtectHome", "NoNewPrivileges", "CapabilityBoundingSet",
               "PrivateDevices", "RestrictAddressFamilies", "SystemCallFilter", "MemoryDenyWriteExecute",
               "ProtectProc", "UMask", "PrivateUsers", "RestrictNamespaces", "LockPersonality")
    assert {k: hook.get(k) for k in sandbox} == {k: daemon.get(k) for k in sandbox}
    for credential in (v.partition(":")[0] for v in hook["LoadCredential"]):
        assert "SecretStr" in str(setting_at(credential.split("__")).annotation), credential


# ---- the example environment file ----------------------------------------------------------


def example_values() -> dict[str, str]:
    values = {}
    for line in (UNITS / "outbox-mailer.env.example").read_text().splitlines():
        m = re.fullmatch(r"#(OUTBOX_MAILER_[A-Z0-9_]+)=(.*)", line)
        if m:
            values[m.group(1)] = m.group(2)
    return values


def same_default(text: str, default: Any) -> bool:
    if default is None or isinstance(default, SecretStr):
        return text == ""
    if isinstance(default, bool):
        return text == str(default).lower()
    if isinstance(default, int | float):
        return float(text) == float(default)
    return text == str(default)


def expected_defaults(model: type[BaseModel], prefix: str = "OUTBOX_MAILER_") -> dict[str, Any]:
    """Every variable a model reads, with its default; nested models recursively (not transports)."""
    expected: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if name == "transports":
            continue
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            expected.update(expected_defaults(annotation, f"{prefix}{name.upper()}__"))
        else:
            expected[f"{prefix}{name.upper()}"] = field.default
    return expected


def test_example_env_file_documents_every_setting_with_its_default() -> None:
    values = example_values()
    expected = expected_defaults(Settings)
    assert "OUTBOX_MAILER_SMTP__HOST" in expected and "OUTBOX_MAILER_RETRY__BASE_SECONDS" in expected
    missing = sorted(set(expected) - set(values))
    assert not missing, f"not in outbox-mailer.env.example: {missing}"
    wrong = {k: (values[k], expected[k]) for k in expected if not same_default(values[k], expected[k])}
    assert not wrong, f"example value differs from the default: {wrong}"
    for name in ApiTransportSettings.model_fields:
        assert any(re.fullmatch(rf"OUTBOX_MAILER_TRANSPORTS__[A-Z]+__{name.upper()}", k) for k in values), name
    assert "OUTBOX_MAILER_SECRETS_DIR" in values


def test_example_env_file_values_load_as_the_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # no stray .env
    for key in [k for k in os.environ if k.startswith("OUTBOX_MAILER_")]:
        monkeypatch.delenv(key)
    defaults = Settings().model_dump()
    for key, value in example_values().items():
        if value and "__TRANSPORTS__" not in key and not key.startswith("OUTBOX_MAILER_TRANSPORTS__"):
            monkeypatch.setenv(key, value)
    assert Settings().model_dump() == defaults
