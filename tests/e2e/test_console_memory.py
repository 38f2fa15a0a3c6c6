"""`outbox-mailer console` as a process under a burst of sign-ins: each password check (Argon2id) holds
64 MiB, and the process's peak memory stays within a few of them however many sign-ins arrive at once."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from tests.e2e.conftest import base_env, wait_until_serving
from tests.smtp_server import free_port

MIB = 1024 * 1024
BURST = 16


def memory_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def test_a_burst_of_sign_ins_checks_two_passwords_at_a_time_and_stays_within_memory(db_url: str) -> None:
    env = base_env(OUTBOX_MAILER_DATABASE_URL=db_url, OUTBOX_MAILER_DEFAULT_FROM="App <app@example.com>")
    cli = [sys.executable, "-m", "outbox_mailer"]
    added = subprocess.run([*cli, "console-user", "add", "olga", "--role", "operator"], env=env, text=True,
                           input="a long passphrase\n", capture_output=True, timeout=60)
    assert added.returncode == 0, added.stderr
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([*cli, "console"], text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**env, "OUTBOX_MAILER_CONSOLE__ADDRESS": f"127.0.0.1:{port}",
                                 "OUTBOX_MAILER_CONSOLE__FORWARDED_FOR_PROXIES": "127.0.0.1"})
    try:
        wait_until_serving(proc, base)
        with httpx.Client(base_url=base) as client:
            page = client.get("/login")
        token = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
        before = memory_kib(proc.pid, "VmRSS")
        start = threading.Barrier(BURST)

        def sign_in(i: int) -> int:
            with httpx.Client(base_url=base, cookies=page.cookies, timeout=60,
                              headers={"Origin": base, "X-Forwarded-For": f"203.0.113.{i + 1}"}) as c:
                start.wait()
                return c.post("/login", data={"username": "olga", "password": f"wrong password {i}",
                                              "csrf_token": token}).status_code

        with ThreadPoolExecutor(BURST) as pool:
            answers = list(pool.map(sign_in, range(BURST)))
        assert sorted(set(answers)) == [401], answers  # every one checked (16 places: 2 checking, 14 waiting)
        grown = (memory_kib(proc.pid, "VmHWM") - before) * 1024
        assert grown < 4 * 64 * MIB, f"peak grew by {grown // MIB} MiB"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
