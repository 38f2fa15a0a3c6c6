"""Build the wheel once, install it into a fresh venv, and run its CLI as a subprocess."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.smtp_server import SmtpTestServer

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Installed:
    wheel: Path
    bin: Path

    def cli(self, *args: str, env: dict[str, str] | None = None, input: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.bin / "outbox-mailer"), *args], capture_output=True, text=True,
                              env=env, input=input, timeout=timeout)


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    """Built and installed once per run: under pytest-xdist the first worker to get here does it, in
    the run's temp dir the workers share, and the other waits for it (20 s of build and install)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        work = tmp_path_factory.getbasetemp().parent / "wheel"  # the run's dir; each worker's is below it
        work.mkdir(exist_ok=True)
    else:
        work = tmp_path_factory.mktemp("wheel")
    with open(work / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (work / "done").exists():
            shutil.rmtree(work / "dist", ignore_errors=True)  # a worker that failed midway left it
            shutil.rmtree(work / "venv", ignore_errors=True)
            subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(work / "dist"), str(ROOT)],
                           check=True, capture_output=True, timeout=300)
            install_into_fresh_venv(sys.executable, work / "venv", next((work / "dist").glob("outbox_mailer-*.whl")))
            (work / "done").touch()
    [wheel] = (work / "dist").glob("outbox_mailer-*.whl")
    yield Installed(wheel, work / "venv" / "bin")


def install_into_fresh_venv(python: str, venv: Path, wheel: Path) -> None:
    """A new venv of ``python`` with ``wheel`` and its dependencies installed by this environment's pip
    (``pip --python``): a venv's own pip, bootstrapped by ensurepip, took ~7 s and is never used."""
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True, timeout=120)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    str(wheel)], check=True, capture_output=True, timeout=600)


def wheel_names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        return set(zf.namelist())


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_MAILER_")}
    env.update(extra)
    return env


def wait_until_serving(proc: subprocess.Popen[str], base: str, timeout: float = 30) -> None:
    """Until ``base``/healthz answers (the console, the receiver); fails when ``proc`` exits first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            httpx.get(base + "/healthz", timeout=1)
            return
        except httpx.TransportError:
            assert proc.poll() is None and time.monotonic() < deadline, f"nothing serves {base}"
            time.sleep(0.1)


# ---- the installed daemon on the test's database, sending to the test's SMTP server ----------------


@pytest.fixture
def cli_env(db_url: str, smtp_server: SmtpTestServer) -> dict[str, str]:
    """The environment of the installed CLI and daemon: the test's database, its SMTP server, quick retries."""
    return base_env(
        OUTBOX_MAILER_DATABASE_URL=db_url,
        OUTBOX_MAILER_DEFAULT_FROM="App <app@example.com>",
        OUTBOX_MAILER_SMTP__HOST=smtp_server.host,
        OUTBOX_MAILER_SMTP__PORT=str(smtp_server.port),
        OUTBOX_MAILER_SMTP__TLS="none",
        OUTBOX_MAILER_RETRY__BASE_SECONDS="0.1",
        OUTBOX_MAILER_RETRY__MAX_SECONDS="0.5",
        OUTBOX_MAILER_POLL_INTERVAL_SECONDS="1",
    )


@pytest.fixture
def cli_daemon(installed: Installed, cli_env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """``outbox-mailer run`` of the installed wheel with ``cli_env``; killed at the end if still running."""
    proc = subprocess.Popen([str(installed.bin / "outbox-mailer"), "run"], env=cli_env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)
