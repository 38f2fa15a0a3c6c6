"""`outbox-mailer console-user` and `outbox-mailer console` from the installed wheel: users added with
the password on standard input, bad input refused (exit 2), the console refusing a non-loopback
address with nobody to sign in, and serving its pages (templates and assets from the wheel)."""

from __future__ import annotations

import json
import re
import subprocess

import httpx
import pytest

from tests.e2e.conftest import Installed, base_env, wait_until_serving
from tests.smtp_server import free_port


@pytest.fixture
def env(db_url: str) -> dict[str, str]:
    return base_env(OUTBOX_MAILER_DATABASE_URL=db_url, OUTBOX_MAILER_SMTP__TLS="none",
                    OUTBOX_MAILER_DEFAULT_FROM="App <app@example.com>")


def test_console_users_are_added_listed_and_removed(installed: Installed, env: dict[str, str]) -> None:
    added = installed.cli("console-user", "add", "olga", "--role", "operator", env=env, input="a long passphrase\n")
    assert added.returncode == 0, added.stderr
    again = installed.cli("console-user", "add", "olga", "--role", "viewer", env=env, input="a long passphrase\n")
    assert again.returncode == 2 and "exists" in again.stderr
    short = installed.cli("console-user", "add", "vic", "--role", "viewer", env=env, input="short\n")
    assert short.returncode == 2 and "12 to 1024 characters" in short.stderr
    assert installed.cli("console-user", "add", "vic", "--role", "admin", env=env, input="x" * 20).returncode == 2
    assert installed.cli("console-user", "add", "two words", "--role", "viewer", env=env, input="x" * 20).returncode == 2
    assert installed.cli("console-user", "add", "vic", "--role", "viewer", env=env, input="y" * 20).returncode == 0
    listed = installed.cli("console-user", "list", "--json", env=env)
    users = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(u["name"], u["role"]) for u in users] == [("olga", "operator"), ("vic", "viewer")]
    assert "hash" not in listed.stdout and "argon2" not in listed.stdout
    assert installed.cli("console-user", "remove", "vic", env=env).returncode == 0
    assert installed.cli("console-user", "remove", "vic", env=env).returncode == 1


def test_console_refuses_a_public_address_with_nobody_to_sign_in(installed: Installed, env: dict[str, str]) -> None:
    out = installed.cli("console", env={**env, "OUTBOX_MAILER_CONSOLE__ADDRESS": f"0.0.0.0:{free_port()}"})
    assert out.returncode == 2 and "not a loopback address" in out.stderr, out.stderr
    out = installed.cli("console", env=env)
    assert out.returncode == 2 and "OUTBOX_MAILER_CONSOLE__ADDRESS" in out.stderr
    half = {**env, "OUTBOX_MAILER_CONSOLE__ADDRESS": "127.0.0.1:9", "OUTBOX_MAILER_CONSOLE__TRUSTED_PROXIES": "10.0.0.1"}
    out = installed.cli("console", env=half)
    assert out.returncode == 2 and "TRUSTED_PROXY_HEADER" in out.stderr


def test_the_console_command_serves_its_pages_and_assets(installed: Installed, env: dict[str, str]) -> None:
    assert installed.cli("console-user", "add", "olga", "--role", "operator", env=env,
                         input="a long passphrase\n").returncode == 0
    port = free_port()
    proc = subprocess.Popen([str(installed.bin / "outbox-mailer"), "console"], text=True,
                            env={**env, "OUTBOX_MAILER_CONSOLE__ADDRESS": f"127.0.0.1:{port}"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(proc, base)
        with httpx.Client(base_url=base, headers={"Origin": base}) as client:
            token = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/login").text).group(1)  # type: ignore[union-attr]
            signed = client.post("/login", data={"username": "olga", "password": "a long passphrase",
                                                 "csrf_token": token})
            assert signed.status_code == 303
            assert "olga (operator)" in client.get("/").text
            assert client.get("/static/console.css").status_code == 200
            assert client.get("/static/refresh.js").headers["content-type"].startswith(("text/javascript",
                                                                                        "application/javascript"))
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, out
    assert "console listening on 127.0.0.1" in out and "Traceback" not in out
