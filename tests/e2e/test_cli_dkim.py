"""DKIM through the installed CLI: `check` and `run` refuse a bad key or a missing setting with exit 2 and one
clear line (never the key, never a traceback); the key as the credential file dkim__private_key signs what
`run` sends, and `check` says so."""

from __future__ import annotations

import base64
import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import dkim
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.e2e.conftest import Installed, base_env
from tests.smtp_server import SmtpTestServer

DOMAIN, SELECTOR = "example.com", "s2026"


@pytest.fixture(scope="module")
def key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
def env(db_url: str, smtp_server: SmtpTestServer) -> dict[str, str]:
    return base_env(OUTBOX_MAILER_DATABASE_URL=db_url, OUTBOX_MAILER_DEFAULT_FROM="App <app@example.com>",
                    OUTBOX_MAILER_SMTP__HOST=smtp_server.host, OUTBOX_MAILER_SMTP__PORT=str(smtp_server.port),
                    OUTBOX_MAILER_SMTP__TLS="none", OUTBOX_MAILER_POLL_INTERVAL_SECONDS="1",
                    OUTBOX_MAILER_DKIM__DOMAIN=DOMAIN, OUTBOX_MAILER_DKIM__SELECTOR=SELECTOR)


@pytest.fixture
def credentials(tmp_path: Path, key: rsa.RSAPrivateKey) -> Path:
    """A credentials directory as systemd's LoadCredential= makes it, with the key in dkim__private_key."""
    directory = tmp_path / "credentials"
    directory.mkdir()
    (directory / "dkim__private_key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()))
    return directory


def assert_refused(out: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    for needle in needles:
        assert needle in out.stderr, out.stderr


@pytest.mark.parametrize("command", ["check", "run"])
def test_an_invalid_key_refuses_start_up_without_printing_it(installed: Installed, env: dict[str, str],
                                                             key: rsa.RSAPrivateKey, command: str) -> None:
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    broken = pem.replace(pem.splitlines()[3], pem.splitlines()[3][::-1])  # one base64 line garbled
    out = installed.cli(command, env={**env, "OUTBOX_MAILER_DKIM__PRIVATE_KEY": broken}, timeout=30)
    assert_refused(out, "OUTBOX_MAILER_DKIM__PRIVATE_KEY: not a PEM private key")
    assert not any(line in out.stderr + out.stdout for line in broken.splitlines()[1:-1])


@pytest.mark.parametrize("command", ["check", "run"])
def test_a_missing_selector_refuses_start_up_naming_it(installed: Installed, env: dict[str, str],
                                                       credentials: Path, command: str) -> None:
    without = {k: v for k, v in env.items() if k != "OUTBOX_MAILER_DKIM__SELECTOR"}
    out = installed.cli(command, env={**without, "CREDENTIALS_DIRECTORY": str(credentials)}, timeout=30)
    assert_refused(out, "OUTBOX_MAILER_DKIM__SELECTOR is not set")


def test_a_key_file_that_is_not_pem_text_names_the_setting(installed: Installed, env: dict[str, str],
                                                           credentials: Path, key: rsa.RSAPrivateKey) -> None:
    (credentials / "dkim__private_key").write_bytes(key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    out = installed.cli("run", env={**env, "CREDENTIALS_DIRECTORY": str(credentials)}, timeout=30)
    assert_refused(out, "(OUTBOX_MAILER_DKIM__PRIVATE_KEY) is not valid UTF-8")


@pytest.fixture
def daemon(installed: Installed, env: dict[str, str], credentials: Path) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen([str(installed.bin / "outbox-mailer"), "run"],
                            env={**env, "CREDENTIALS_DIRECTORY": str(credentials)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)


def test_the_credential_file_signs_what_run_sends_and_check_reports_it(
        installed: Installed, env: dict[str, str], credentials: Path, key: rsa.RSAPrivateKey,
        smtp_server: SmtpTestServer, daemon: subprocess.Popen[str]) -> None:
    with_key = {**env, "CREDENTIALS_DIRECTORY": str(credentials)}
    check = installed.cli("check", "--json", env=with_key)
    assert check.returncode == 0, check.stdout + check.stderr
    checks = {c["check"]: c for c in map(json.loads, check.stdout.splitlines())}
    assert checks["configuration"]["detail"]["dkim"] == {"domain": DOMAIN, "selector": SELECTOR,
                                                         "private_key": "**********"}
    assert checks["dkim"]["detail"].startswith(f"on: domain (d=) {DOMAIN}, selector (s=) {SELECTOR}, rsa-sha256 "
                                               "with a 2048-bit key")
    assert "PRIVATE KEY" not in check.stdout
    off = installed.cli("check", env={k: v for k, v in env.items() if "DKIM" not in k})
    assert "[ok] dkim: off" in off.stdout

    out = installed.cli("enqueue", "--key", "signed-1", "--to", "zoe@example.org", "--subject", "Grüße",
                        "--text", "Hallo", env=with_key)
    assert out.returncode == 0, out.stderr
    assert smtp_server.wait_until(lambda: smtp_server.accepted, timeout=30), daemon.stdout
    data = smtp_server.accepted[0].data
    der = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    record = b"v=DKIM1; k=rsa; p=" + base64.b64encode(der)
    name = f"{SELECTOR}._domainkey.{DOMAIN}.".encode()
    assert data.startswith(b"DKIM-Signature: ")
    assert dkim.verify(data, dnsfunc=lambda qname, timeout=5: record if qname == name else None)
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(timeout=15) == 0
