"""`run --processes N`: N daemons under one parent that speaks for them to systemd."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Installed, base_env
from tests.e2e.test_cli import psql
from tests.smtp_server import SmtpTestServer


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    path = f"/tmp/om-notify-{os.getpid()}-{time.monotonic_ns()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(0.2)
    yield sock, path
    sock.close()
    os.unlink(path)


def drain(sock: socket.socket, seconds: float) -> list[str]:
    got, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            got.append(sock.recv(65536).decode())
        except TimeoutError:
            pass
    return got


def receive_until(sock: socket.socket, seen: Callable[[list[str]], bool], seconds: float = 60.0) -> list[str]:
    """The notifications received until ``seen`` says enough came (``seconds`` only bounds a failure)."""
    got, deadline = [], time.monotonic() + seconds
    while not seen(got) and time.monotonic() < deadline:
        try:
            got.append(sock.recv(65536).decode())
        except TimeoutError:
            pass
    return got


def children_of(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


def start(installed: Installed, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([str(installed.bin / "outbox-mailer"), "run", "--processes", "2"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture
def env(db_url: str, smtp_server: SmtpTestServer, notify_socket: tuple[socket.socket, str]) -> dict[str, str]:
    return base_env(
        OUTBOX_MAILER_DATABASE_URL=db_url, OUTBOX_MAILER_DEFAULT_FROM="app@example.com",
        OUTBOX_MAILER_SMTP__HOST=smtp_server.host, OUTBOX_MAILER_SMTP__PORT=str(smtp_server.port),
        OUTBOX_MAILER_SMTP__TLS="none", OUTBOX_MAILER_POLL_INTERVAL_SECONDS="0.5",
        OUTBOX_MAILER_WORKER_NAME="w", NOTIFY_SOCKET=notify_socket[1], WATCHDOG_USEC="1000000",
    )


def test_two_processes_share_the_work_and_stop_cleanly(
    installed: Installed, env: dict[str, str], db_url: str, smtp_server: SmtpTestServer,
    notify_socket: tuple[socket.socket, str],
) -> None:
    smtp_server.delay("DATA", 0.01)
    psql(db_url, "INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body) "
                 "SELECT 'k' || g, ARRAY['a@example.com'], 's', 'b' FROM generate_series(1, 400) g;")
    proc = start(installed, env)
    try:
        messages = receive_until(notify_socket[0], lambda got: any("READY=1" in m for m in got)
                                 and any("WATCHDOG=1" in m for m in got))
        assert any("READY=1" in m for m in messages), messages
        assert any("WATCHDOG=1" in m for m in messages), "the parent forwards the children's pings"
        assert len(children_of(proc.pid)) == 2
        deadline = time.monotonic() + 30
        while len(smtp_server.accepted) < 400 and time.monotonic() < deadline:
            time.sleep(0.1)
        workers = subprocess.run(["psql", "-X", "-At", db_url, "-c",
                                  "SELECT DISTINCT worker FROM email_delivery_attempts ORDER BY 1"],
                                 capture_output=True, text=True, check=True).stdout.split()
        assert workers == ["w/0", "w/1"], "both processes sent"
        assert len(smtp_server.accepted) == 400
        messages += drain(notify_socket[0], 0.2)
        assert sum("READY=1" in m for m in messages) == 1, "one READY for the group, not one per process"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        assert any("STOPPING=1" in m for m in receive_until(notify_socket[0], lambda got: any("STOPPING=1" in m for m in got), 5.0))
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_dead_child_stops_the_group_with_a_failure(installed: Installed, env: dict[str, str]) -> None:
    proc = start(installed, env)
    try:
        deadline = time.monotonic() + 15
        while len(children_of(proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        first, second = children_of(proc.pid)
        os.kill(first, signal.SIGKILL)
        assert proc.wait(timeout=20) != 0
        with pytest.raises(ProcessLookupError):
            os.kill(second, 0)
    finally:
        if proc.poll() is None:
            proc.kill()
