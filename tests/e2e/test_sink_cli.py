"""``outbox-mailer sink`` from the installed wheel: a message in, its line out and its .eml file on disk."""

from __future__ import annotations

import signal
import smtplib
import socket
import subprocess
from pathlib import Path

from tests.e2e.conftest import Installed, base_env
from tests.smtp_server import free_port

MESSAGE = (b"From: App <app@example.com>\r\n"
           b"To: ada@example.com\r\n"
           b"Subject: =?utf-8?q?Caf=C3=A9_opens?=\r\n"
           b"Message-ID: <k1.abc@example.com>\r\n"
           b"\r\n"
           b"Doors open at nine.\r\n"
           b".a line that starts with a dot\r\n")


def test_sink_prints_a_line_and_writes_the_eml_of_each_message_then_exits_0_on_sigterm(
        installed: Installed, tmp_path: Path) -> None:
    port, folder = free_port(), tmp_path / "mail"
    proc = subprocess.Popen([str(installed.bin / "outbox-mailer"), "sink", "--address", f"127.0.0.1:{port}",
                             "--eml-dir", str(folder)], env=base_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        assert ready.startswith(f"SMTP sink listening on 127.0.0.1:{port}, writing .eml files to {folder}")
        with smtplib.SMTP("127.0.0.1", port, timeout=10) as client:
            refused = client.sendmail("app@example.com", ["ada@example.com", "bob@example.com"], MESSAGE)
        assert refused == {}
        line = proc.stdout.readline()
        [eml] = folder.glob("*.eml")
        assert line == (
            'received from=<app@example.com> to=<ada@example.com>,<bob@example.com> subject="Café opens" '
            f"size={len(MESSAGE)} message_id=<k1.abc@example.com> eml={eml}\n")
        assert eml.read_bytes() == MESSAGE
        assert [p.name for p in folder.iterdir()] == [eml.name]  # no temporary file left behind
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_sink_refuses_a_bad_or_taken_address_or_an_unwritable_folder_with_exit_2(installed: Installed,
                                                                          tmp_path: Path) -> None:
    bad = installed.cli("sink", "--address", "127.0.0.1", env=base_env())
    assert bad.returncode == 2
    assert "--address '127.0.0.1': expected host:port" in bad.stderr
    (tmp_path / "a-file").write_text("")
    unwritable = installed.cli("sink", "--address", f"127.0.0.1:{free_port()}",
                               "--eml-dir", str(tmp_path / "a-file" / "mail"), env=base_env())
    assert unwritable.returncode == 2
    assert f"--eml-dir '{tmp_path / 'a-file' / 'mail'}': cannot write there" in unwritable.stderr
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        busy = installed.cli("sink", "--address", f"127.0.0.1:{port}", env=base_env())
    assert busy.returncode == 2
    assert f"--address '127.0.0.1:{port}': cannot listen there" in busy.stderr


def test_check_against_a_local_sink_names_the_tls_and_port_settings_to_change(
        installed: Installed, cli_env: dict[str, str]) -> None:
    port = free_port()
    proc = subprocess.Popen([str(installed.bin / "outbox-mailer"), "sink", "--address", f"127.0.0.1:{port}"],
                            env=base_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("SMTP sink listening")
        env = {k: v for k, v in cli_env.items() if not k.startswith("OUTBOX_MAILER_SMTP__")}
        starttls = installed.cli("check", env={**env, "OUTBOX_MAILER_SMTP__HOST": "127.0.0.1",
                                               "OUTBOX_MAILER_SMTP__PORT": str(port)})
        assert starttls.returncode == 3
        [smtp] = [line for line in starttls.stdout.splitlines() if line.startswith("[FAIL] smtp")]
        assert "does not offer STARTTLS" in smtp
        assert (f"127.0.0.1 is this machine: a local relay or sink without TLS needs "
                f"OUTBOX_MAILER_SMTP__TLS=none and OUTBOX_MAILER_SMTP__PORT={port}") in smtp
        plain = installed.cli("check", env={**env, "OUTBOX_MAILER_SMTP__HOST": "127.0.0.1",
                                            "OUTBOX_MAILER_SMTP__PORT": str(port), "OUTBOX_MAILER_SMTP__TLS": "none"})
        assert plain.returncode == 0, plain.stdout + plain.stderr
        assert "[ok] smtp: 127.0.0.1:" in plain.stdout and "is this machine" not in plain.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
