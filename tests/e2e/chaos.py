"""Helpers for the fault-injection e2e tests: daemon processes, SQL through psql, figures.

Every daemon is the installed ``outbox-mailer run`` in its own process group, its
stdout/stderr in one log file per process. The ``fleet`` fixture kills (by PID) every
process it started that is still alive at teardown, and prints the tail of each log
when the test failed. ``figures`` records measured numbers as junit properties and prints
them; tests/conftest.py lists them all in a "chaos figures" section of the terminal summary.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIGURES_KEYWORD
from tests.e2e.conftest import Installed, base_env
from tests.smtp_server import free_port

KEY_HEADER = "X-Test-Key"
FINAL = ("sent", "failed", "cancelled", "in_doubt")
DEFAULT_DEADLINE_SECONDS = 180  # per test; a test may set its own with fleet.deadline()

# Settings that make every fault visible within seconds (issue 3, item 8).
FAST_SETTINGS = {
    "OUTBOX_MAILER_DEFAULT_FROM": "app@example.com",
    "OUTBOX_MAILER_SMTP__TLS": "none",
    "OUTBOX_MAILER_SMTP__CONNECT_TIMEOUT_SECONDS": "1",
    "OUTBOX_MAILER_SMTP__COMMAND_TIMEOUT_SECONDS": "1",
    "OUTBOX_MAILER_SMTP__DATA_TIMEOUT_SECONDS": "2",
    "OUTBOX_MAILER_SMTP__SEND_TIMEOUT_SECONDS": "3",
    # 4 in the brief; the daemon now requires more than send timeout + 1 s (config.py)
    "OUTBOX_MAILER_RESCUE_AFTER_SECONDS": "4.5",
    "OUTBOX_MAILER_RESCUE_INTERVAL_SECONDS": "0.5",
    "OUTBOX_MAILER_RETRY__BASE_SECONDS": "0.05",
    "OUTBOX_MAILER_RETRY__MAX_SECONDS": "0.5",
    "OUTBOX_MAILER_MAX_ATTEMPTS": "50",
    "OUTBOX_MAILER_CONCURRENCY": "16",
    "OUTBOX_MAILER_SMTP__POOL_SIZE": "8",
    "OUTBOX_MAILER_POLL_INTERVAL_SECONDS": "0.5",
}


def daemon_env(db_url: str, smtp_port: int, **overrides: str) -> dict[str, str]:
    """Environment for a daemon: the fast settings, then ``overrides`` (full variable names)."""
    settings = {
        "OUTBOX_MAILER_DATABASE_URL": db_url,
        "OUTBOX_MAILER_SMTP__HOST": "127.0.0.1",
        "OUTBOX_MAILER_SMTP__PORT": str(smtp_port),
        **FAST_SETTINGS,
        **overrides,
    }
    return base_env(**settings)


def resend_env(db_url: str, base_url: str, **overrides: str) -> dict[str, str]:
    """A daemon sending every row through the Resend transport at ``base_url`` (the fake provider);
    SMTP is configured, on a closed port, and unused. ``overrides`` as for :func:`daemon_env`."""
    return daemon_env(db_url, free_port(), **{
        "OUTBOX_MAILER_TRANSPORTS__RESEND__KIND": "resend",
        "OUTBOX_MAILER_TRANSPORTS__RESEND__API_KEY": "test",
        "OUTBOX_MAILER_TRANSPORTS__RESEND__BASE_URL": base_url,
        "OUTBOX_MAILER_DEFAULT_TRANSPORT": "resend",
        **overrides,
    })


# ---- SQL through psql (works across a PostgreSQL restart, no driver state) -------------


def sql(url: str, query: str, *, timeout: float = 60) -> list[list[str]]:
    """Rows of ``query`` as lists of strings (NULL is '')."""
    out = subprocess.run(
        ["psql", "-X", "-q", "-A", "-t", "-F", "\t", "-v", "ON_ERROR_STOP=1", url, "-c", query],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"psql failed ({out.returncode}): {out.stderr.strip()}\nquery: {query}")
    return [line.split("\t") for line in out.stdout.splitlines() if line]


def scalar(url: str, query: str) -> str:
    rows = sql(url, query)
    return rows[0][0] if rows else ""


def status_counts(url: str) -> dict[str, int]:
    return {status: int(n) for status, n in sql(url, "SELECT status, count(*) FROM email_deliveries GROUP BY 1")}


def statuses(url: str) -> dict[str, str]:
    """dedupe_key -> status of every row."""
    return {key: status for key, status in sql(url, "SELECT dedupe_key, status FROM email_deliveries")}


def insert_rows(url: str, n: int, prefix: str = "k-", *, start: int = 1,
                recipient: str = "'rcpt-' || g || '@example.com'") -> list[str]:
    """Insert ``n`` rows keyed ``prefix<g>`` in one INSERT ... SELECT; each carries its key in X-Test-Key.

    ``recipient`` is an SQL expression of the series value ``g``.
    """
    sql(url, f"""
        INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, headers)
        SELECT '{prefix}' || g, ARRAY[{recipient}], 'Chaos ' || g, 'Body of message ' || g,
               jsonb_build_object('{KEY_HEADER}', '{prefix}' || g)
        FROM generate_series({start}, {start + n - 1}) AS g
    """, timeout=300)  # fmt: skip
    return [f"{prefix}{g}" for g in range(start, start + n)]


def wait_until(predicate: Callable[[], Any], timeout: float, *, interval: float = 0.2,
               what: str | Callable[[], str] = "condition") -> float:
    """Poll ``predicate`` until truthy; returns the seconds it took, fails the test after ``timeout``."""
    started = time.monotonic()
    last_error: RuntimeError | None = None
    while True:
        try:
            if predicate():
                return time.monotonic() - started
        except RuntimeError as exc:  # psql while PostgreSQL is restarting
            last_error = exc
        if time.monotonic() - started > timeout:
            detail = f" (last psql error: {last_error})" if last_error else ""
            try:
                described = what() if callable(what) else what
            except RuntimeError as exc:
                described = f"(could not describe: {exc})"
            pytest.fail(f"timed out after {timeout:g} s waiting for {described}{detail}")
        time.sleep(interval)


# ---- daemon processes -------------------------------------------------------------------


@dataclass
class DaemonProcess:
    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    started: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def worker(self) -> str:
        return self.name

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill9(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def terminate(self) -> None:
        os.kill(self.pid, signal.SIGTERM)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout=timeout)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def wait_for_log(self, pattern: str, timeout: float = 30) -> float:
        regex = re.compile(pattern)

        def seen() -> bool:
            if regex.search(self.log()):
                return True
            if not self.alive():
                pytest.fail(f"daemon {self.name} exited with {self.proc.returncode} before logging "
                            f"{pattern!r}; log tail:\n{self.log_tail()}")
            return False

        return wait_until(seen, timeout, interval=0.05, what=lambda: f"{pattern!r} in the log of {self.name}:\n"
                                                                    f"{self.log_tail()}")

    def rss_kib(self) -> int | None:
        """Resident set size from /proc/PID/status (kB), None once the process is gone."""
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        except OSError:
            return None
        return None


class HardTimeout(Exception):
    """The test ran past its hard deadline (raised by SIGALRM in the test's main thread)."""


class Fleet:
    """Starts daemons; at teardown kills (SIGKILL, by PID) the ones still alive."""

    def __init__(self, installed: Installed, directory: Path) -> None:
        self.installed = installed
        self.directory = directory
        self.daemons: list[DaemonProcess] = []

    def start(self, env: dict[str, str], name: str, *args: str) -> DaemonProcess:
        log_path = self.directory / f"{name}.log"
        env = {**env, "OUTBOX_MAILER_WORKER_NAME": name}
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [str(self.installed.bin / "outbox-mailer"), "run", *args], env=env, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.directory,
            )  # fmt: skip
        daemon = DaemonProcess(name, proc, log_path)
        self.daemons.append(daemon)
        return daemon

    def deadline(self, seconds: float) -> None:
        """Fail the test with HardTimeout if it is still running ``seconds`` from now."""

        def expired(signum: int, frame: Any) -> None:
            raise HardTimeout(f"hard test timeout of {seconds:g} s exceeded")

        signal.signal(signal.SIGALRM, expired)
        signal.setitimer(signal.ITIMER_REAL, seconds)

    def cli(self, env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return self.installed.cli(*args, env=env, timeout=timeout)

    def kill_leftovers(self) -> None:
        for daemon in self.daemons:
            if daemon.alive():
                try:
                    os.kill(daemon.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                daemon.proc.wait(timeout=10)

    def tails(self, lines: int = 40) -> str:
        return "\n".join(f"----- {d.name} (pid {d.pid}, exit {d.proc.returncode}) -----\n{d.log_tail(lines)}"
                         for d in self.daemons)


@pytest.fixture
def fleet(installed: Installed, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Fleet]:
    failed_before = request.session.testsfailed
    fleet = Fleet(installed, tmp_path)
    previous = signal.getsignal(signal.SIGALRM)
    fleet.deadline(DEFAULT_DEADLINE_SECONDS)
    try:
        yield fleet
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        fleet.kill_leftovers()
        if request.session.testsfailed > failed_before:
            print(f"\ndaemon logs (tails) of {request.node.name}:\n{fleet.tails()}")


# ---- measured figures --------------------------------------------------------------------


class Figures:
    def __init__(self, test: str, record: Callable[[str, object], None]) -> None:
        self.test, self._record = test, record

    def __call__(self, name: str, value: object) -> None:
        # as text: the report carrying it may cross from a pytest-xdist worker, which sends only plain types
        self._record(name, str(value))
        print(f"{self.test}: {name} = {value}")


@pytest.fixture
def figures(request: pytest.FixtureRequest, record_property: Callable[[str, object], None]) -> Figures:
    request.node.keywords[FIGURES_KEYWORD] = True  # tests/conftest.py lists its properties in the summary
    return Figures(request.node.name, record_property)


sent_count_query = "SELECT count(*) FROM email_deliveries WHERE status = 'sent'"


def sent_count(url: str) -> int:
    return int(scalar(url, sent_count_query) or 0)


@dataclass
class KillRun:
    in_flight: list[set[str]] = field(default_factory=list)  # per kill: keys the dead process had in 'sending'
    left: list[int] = field(default_factory=list)  # per kill: rows not yet final

    @property
    def in_flight_total(self) -> int:
        return sum(len(keys) for keys in self.in_flight)

    @property
    def in_flight_keys(self) -> set[str]:
        return set().union(*self.in_flight)

    def kill(self, url: str, daemon: DaemonProcess) -> None:
        """kill -9 ``daemon``; note the rows it had in 'sending' and the rows not yet final."""
        assert daemon.alive(), f"daemon exited on its own:\n{daemon.log_tail()}"
        daemon.kill9()
        rows = sql(url, f"SELECT dedupe_key FROM email_deliveries WHERE status = 'sending' "
                        f"AND claimed_by = '{daemon.worker}'")  # fmt: skip
        self.in_flight.append({key for (key,) in rows})
        counts = status_counts(url)
        self.left.append(counts.get("pending", 0) + counts.get("sending", 0))


def kill_repeatedly(url: str, fleet: Fleet, env: dict[str, str], rng: Any, kills: int, *,
                    max_sent_between: int, name: str = "kill") -> KillRun:
    """Start a daemon, kill -9 it at a random moment, note what it had in flight; ``kills`` times.

    The moment: once this daemon has sent a random 0..max_sent_between rows, plus a random 0..100 ms,
    so that the kills land anywhere in the life of a daemon yet all of them during the drain.
    """
    run = KillRun()
    for i in range(kills):
        target = sent_count(url) + rng.randint(0, max_sent_between)
        daemon = fleet.start(env, f"{name}-{i}")
        daemon.wait_for_log(r"started worker=", 30)
        wait_until(lambda: sent_count(url) >= target or not daemon.alive(), 30, interval=0.02,  # noqa: B023
                   what=lambda: f"{target} rows sent:\n{daemon.log_tail()}")  # noqa: B023  # fmt: skip
        time.sleep(rng.uniform(0, 0.1))
        run.kill(url, daemon)
    return run

