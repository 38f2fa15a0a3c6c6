"""The installed daemon's JSON log (``outbox-mailer --log-format json run``): every line one JSON object,
each email's lines with its fields as top-level keys, written through the CLI's own handler up to the
line that says it stopped."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.e2e.conftest import Installed
from tests.smtp_server import SmtpTestServer

EMAILS = {"cli-ok": "ok@example.com", "cli-grey": "grey@example.com", "cli-gone": "gone@example.com"}
EXPECTED = {"cli-ok": ["sent"], "cli-grey": ["retried", "sent"], "cli-gone": ["failed"]}


def outcomes(lines: list[dict[str, Any]]) -> dict[str, list[str]]:
    return {key: [d["outcome"] for d in lines if d.get("dedupe_key") == key] for key in EMAILS}


def test_the_installed_daemon_logs_each_email_as_a_json_line_with_its_fields(
        installed: Installed, cli_env: dict[str, str], smtp_server: SmtpTestServer, tmp_path: Path) -> None:
    smtp_server.fail("RCPT", "451 4.7.1 greylisted", address="grey@example.com", times=1)
    smtp_server.fail("RCPT", "550 5.1.1 no such user", address="gone@example.com")
    for key, to in EMAILS.items():
        out = installed.cli("enqueue", "--key", key, "--to", to, "--subject", "Hi", "--text", "body", env=cli_env)
        assert out.returncode == 0, out.stderr
    log_path = tmp_path / "daemon.log"
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen([str(installed.bin / "outbox-mailer"), "--log-format", "json", "run"],
                                env=cli_env, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and outcomes(
                [json.loads(line) for line in log_path.read_text(encoding="utf-8").splitlines()]) != EXPECTED:
            assert proc.poll() is None, log_path.read_text(encoding="utf-8")
            time.sleep(0.1)
    finally:
        proc.terminate()
        assert proc.wait(timeout=20) == 0
    lines = [json.loads(line) for line in log_path.read_text(encoding="utf-8").splitlines()]
    assert outcomes(lines) == EXPECTED
    for d in lines:
        assert {"time", "level", "logger", "message"} <= d.keys(), d
        if "dedupe_key" in d:
            assert d["transport"] == "smtp" and isinstance(d["attempt"], int) and d["duration_ms"] >= 0, d
    codes = {(d["dedupe_key"], d["attempt"]): d["reply_code"] for d in lines if "dedupe_key" in d}
    assert codes == {("cli-ok", 1): 250, ("cli-grey", 1): 451, ("cli-grey", 2): 250, ("cli-gone", 1): 550}
    assert lines[-1]["message"].startswith("stopped worker="), "the lines still waiting at exit are written"
