"""The unit under a real systemd: this machine's own OS booted with systemd-nspawn.

The container boots with a volatile root (``/usr`` from the host, everything else a
tmpfs), the built wheel installed into a venv at ``/opt/outbox-mailer/venv``, the unit files
from ``systemd/``, an environment file, and a credential store bound in. It shares the host's
network namespace, so the throwaway PostgreSQL and the SMTP test server (which requires AUTH
with the password given only as a credential) on the host's 127.0.0.1 are reachable inside.

Shown, in order: an unmigrated database keeps the unit from ever becoming active (exit 2,
the migrate message in the journal); after ``migrate`` it is ``activating`` until READY and
then ``active``; a row is delivered with AUTH by the credential's password; with
``WatchdogSec=3`` a wedged loop is killed by the watchdog and restarted; ``systemctl stop``
drains an in-flight send and the main process exits 0. The template unit runs an instance
with its own environment file and credentials.

Needs root, ``systemd-nspawn`` (Debian ``systemd-container``) and ``/usr/bin/python3`` >= 3.11
(the venv must live under ``/usr``-based Python: the root is volatile and ProtectHome hides
/root). Skips with the reason when one is missing.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import psql
from tests.e2e.conftest import ROOT, Installed, base_env, install_into_fresh_venv
from tests.smtp_server import SmtpTestServer, running_smtp_server

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS:UserWarning"),
]

SYSTEM_PYTHON = Path("/usr/bin/python3")
VENV_IN_CONTAINER = "/opt/outbox-mailer/venv"
WEDGE_FILE = "/run/outbox-mailer-test-wedge"
SMTP_USER, SMTP_PASSWORD = "mailer", f"pw-{uuid.uuid4().hex}"
BOOT_TIMEOUT = 90
MASKED = ("systemd-networkd.service", "systemd-networkd.socket", "systemd-networkd-wait-online.service",
          "systemd-resolved.service", "systemd-timesyncd.service")


def say(text: str) -> None:
    print(f"[nspawn] {text}", flush=True)


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


# ---- the machine -----------------------------------------------------------------------------


def skip_reason() -> str | None:
    if sys.platform != "linux":
        return "systemd-nspawn needs Linux"
    if os.geteuid() != 0:
        return "systemd-nspawn needs root"
    if shutil.which("systemd-nspawn") is None:
        return "systemd-nspawn is not installed (apt-get install systemd-container)"
    if shutil.which("nsenter") is None:
        return "nsenter is not installed (util-linux)"
    if not Path("/usr/lib/systemd/systemd").exists():
        return "this OS has no systemd to boot"
    if not SYSTEM_PYTHON.exists():
        return f"{SYSTEM_PYTHON} is missing: the service's venv needs a Python under /usr"
    version = subprocess.run([str(SYSTEM_PYTHON), "-c", "import sys, venv, ensurepip; print(sys.version_info >= (3, 11))"],
                             capture_output=True, text=True, timeout=60, check=False)
    if version.stdout.strip() != "True":
        return f"{SYSTEM_PYTHON} is older than 3.11 or lacks venv/ensurepip (python3-venv): {version.stderr.strip()}"
    return None


def service_venv(installed: Installed, directory: Path) -> Path:
    """The built wheel installed into a venv of the system Python, relocated to /opt/outbox-mailer/venv."""
    venv = directory / "venv"
    install_into_fresh_venv(str(SYSTEM_PYTHON), venv, installed.wheel)
    for script in (venv / "bin").iterdir():  # shebangs name the host path: point them at the bind target
        if script.is_file() and not script.is_symlink():
            data = script.read_bytes()
            if data.startswith(f"#!{venv}/".encode()):
                script.write_bytes(data.replace(f"#!{venv}/".encode(), f"#!{VENV_IN_CONTAINER}/".encode(), 1))
    venv.chmod(0o755)
    return venv


@dataclass
class Machine:
    """A booted container; run commands inside with :meth:`run`."""

    process: subprocess.Popen[bytes]
    leader: int  # host pid of the container's systemd
    console: Path
    config: Path  # bound at /etc/outbox-mailer
    credstore: Path  # bound at /etc/credstore
    dropins: Path
    hostname: str = ""

    def run(self, *args: str, timeout: float = 60, check: bool = False) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(["nsenter", "-t", str(self.leader), "-a", *args], capture_output=True, text=True,
                                timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"{args} exited {result.returncode}: {result.stdout}{result.stderr}")
        return result

    def systemctl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return self.run("systemctl", "--no-pager", *args, timeout=timeout)

    def show(self, unit: str, *props: str) -> dict[str, str]:
        out = self.systemctl("show", unit, *[f"--property={p}" for p in props]).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def journal(self, unit: str, *extra: str) -> str:
        return self.run("journalctl", "--no-pager", "-b", "-u", unit, "-o", "short-precise", *extra).stdout

    def credential(self, name: str, value: str) -> None:
        path = self.credstore / name
        path.write_text(value)
        path.chmod(0o600)


def container_leader(nspawn_pid: int) -> int | None:
    try:
        children = Path(f"/proc/{nspawn_pid}/task/{nspawn_pid}/children").read_text().split()
    except OSError:
        return None
    for child in children:
        try:
            if Path(f"/proc/{child}/comm").read_text().strip() == "systemd":
                return int(child)
        except OSError:
            continue
    return None


def stop_machine(process: subprocess.Popen[bytes], leader: int | None) -> None:
    """Power the container off (SIGTERM to nspawn), then make sure: SIGKILL its init and nspawn."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
    if leader is not None:
        try:
            os.kill(leader, signal.SIGKILL)  # ends every process of the container's pid namespace
        except ProcessLookupError:
            pass
    if process.poll() is None:
        process.kill()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def machine(installed: Installed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("nspawn")
    venv = service_venv(installed, work)
    config, credstore, dropins, presets = (work / n for n in ("etc-outbox-mailer", "credstore", "dropins", "preset"))
    for d in (config, credstore, dropins, presets):
        d.mkdir()
    credstore.chmod(0o700)
    (dropins / "test.conf").write_text("[Service]\nWatchdogSec=3\n")
    # With an empty /etc the first boot applies presets, which would enable and start the units.
    (presets / "00-outbox-mailer-test.preset").write_text("disable outbox-mailer*\n")
    name = f"om-{uuid.uuid4().hex[:8]}"
    command = [
        "systemd-nspawn", "--quiet", "--directory=/", "--volatile=yes", "--register=no", "--keep-unit",
        f"--machine={name}",
        f"--bind-ro={venv}:{VENV_IN_CONTAINER}",
        f"--bind-ro={ROOT / 'systemd' / 'outbox-mailer.service'}:/etc/systemd/system/outbox-mailer.service",
        f"--bind-ro={ROOT / 'systemd' / 'outbox-mailer@.service'}:/etc/systemd/system/outbox-mailer@.service",
        f"--bind-ro={dropins}:/etc/systemd/system/outbox-mailer.service.d",
        f"--bind-ro={presets}:/etc/systemd/system-preset",
        f"--bind-ro={config}:/etc/outbox-mailer",
        f"--bind-ro={credstore}:/etc/credstore",
        "--boot", "--console=read-only", "--",
        "systemd.firstboot=off", *[f"systemd.mask={unit}" for unit in MASKED],
    ]
    console = work / "console.log"
    with open(console, "wb") as out:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    leader = None
    try:
        deadline = time.monotonic() + BOOT_TIMEOUT
        while leader is None and process.poll() is None and time.monotonic() < deadline:
            leader = container_leader(process.pid)
            time.sleep(0.1)
        if leader is None:
            tail = console.read_text(errors="replace")[-2000:]
            pytest.skip(f"systemd-nspawn did not boot this OS (exit {process.poll()}): {tail}")
        m = Machine(process, leader, console, config, credstore, dropins)
        state = wait_until(lambda: m.run("systemctl", "is-system-running", "--wait", timeout=BOOT_TIMEOUT).stdout.strip(),
                           BOOT_TIMEOUT, "the container to boot")
        say(f"booted {name}: system state {state}; leader pid {leader}")
        m.hostname = m.run("hostname", check=True).stdout.strip()
        yield m
    finally:
        stop_machine(process, leader)
        say(f"container stopped (nspawn exit {process.returncode})")


# ---- the outside world: PostgreSQL (pg_server fixture) and an SMTP server with AUTH ---------------


@dataclass
class AuthLog:
    attempts: list[tuple[str, bool]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any) -> Any:
        from aiosmtpd.smtp import AuthResult

        login = getattr(auth_data, "login", b"") or b""
        password = getattr(auth_data, "password", b"") or b""
        ok = login == SMTP_USER.encode() and password == SMTP_PASSWORD.encode()
        with self.lock:
            self.attempts.append((login.decode(errors="replace"), ok))
        return AuthResult(success=ok)


@pytest.fixture
def smtp_with_auth() -> Iterator[tuple[SmtpTestServer, AuthLog]]:
    auth = AuthLog()
    with running_smtp_server(authenticator=auth, auth_require_tls=False, auth_required=True) as server:
        yield server, auth


def env_file(server: SmtpTestServer, **extra: str) -> str:
    values = {
        "OUTBOX_MAILER_SMTP__HOST": server.host,
        "OUTBOX_MAILER_SMTP__PORT": str(server.port),
        "OUTBOX_MAILER_SMTP__TLS": "none",
        "OUTBOX_MAILER_SMTP__ALLOW_PLAINTEXT_AUTH": "true",  # loopback test server only
        "OUTBOX_MAILER_SMTP__USERNAME": SMTP_USER,  # the password only comes as a credential
        "OUTBOX_MAILER_DEFAULT_FROM": "App <app@example.com>",
        "OUTBOX_MAILER_POLL_INTERVAL_SECONDS": "1",
        "OUTBOX_MAILER_SHUTDOWN_GRACE_SECONDS": "20",
        "OUTBOX_MAILER_DEBUG_WEDGE_FILE": WEDGE_FILE,
        **extra,
    }
    return "".join(f"{k}={v}\n" for k, v in values.items())


def insert(url: str, key: str) -> None:
    psql(url, "INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body) "
              f"VALUES ('{key}', ARRAY['to@example.com'], 'hello from systemd', 'body')")


def query(url: str, sql: str) -> str:
    return subprocess.run(["psql", "-X", "-At", "-v", "ON_ERROR_STOP=1", url, "-c", sql], check=True,
                          capture_output=True, text=True, timeout=60).stdout.strip()


def status_of(url: str, key: str) -> str:
    return query(url, f"SELECT status FROM email_deliveries WHERE dedupe_key = '{key}'")


def credentials_are_read_like_systemd_passes_them(tmp_path: Path, installed: Installed) -> str | None:
    """None when the installed package reads $CREDENTIALS_DIRECTORY/smtp__password; else the problem."""
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "smtp__password").write_text("x")
    env = base_env(CREDENTIALS_DIRECTORY=str(creds), OUTBOX_MAILER_SMTP__USERNAME="u",
                   OUTBOX_MAILER_SMTP__TLS="starttls")
    code = ("from outbox_mailer.settings.config import load_settings; s = load_settings(); "
            "print(s.smtp.password is not None and s.smtp.password.get_secret_value() == 'x')")
    result = subprocess.run([str(installed.bin / "python"), "-c", code], capture_output=True, text=True, env=env,
                            cwd=tmp_path, timeout=60, check=False)
    if result.stdout.strip() == "True":
        return None
    return ("the settings do not read the credential smtp__password from $CREDENTIALS_DIRECTORY "
            f"(outbox_mailer/settings/config.py): {(result.stdout + result.stderr).strip().splitlines()[-1:]}")


# ---- the tests ---------------------------------------------------------------------------------


UNIT = "outbox-mailer.service"


def test_service_lifecycle_under_systemd(machine: Machine, installed: Installed, empty_db_url: str,
                                         smtp_with_auth: tuple[SmtpTestServer, AuthLog], tmp_path: Path) -> None:
    server, auth = smtp_with_auth
    problem = credentials_are_read_like_systemd_passes_them(tmp_path, installed)
    assert problem is None, problem
    url = empty_db_url
    (machine.config / "outbox-mailer.env").write_text(env_file(server))
    machine.credential("outbox-mailer.database_url", url)
    machine.credential("outbox-mailer.smtp__password", SMTP_PASSWORD)
    machine.run("rm", "-f", WEDGE_FILE)

    # 1. Unmigrated database: the unit never becomes active; the journal says what to do.
    start = machine.systemctl("start", UNIT, timeout=90)
    props = machine.show(UNIT, "ActiveState", "Result", "ExecMainStatus", "ActiveEnterTimestampMonotonic",
                         "NRestarts")
    journal = machine.journal(UNIT)
    say(f"unmigrated: systemctl start exit {start.returncode}; {props}")
    say("journal: " + next(line for line in journal.splitlines() if "migrate" in line))
    assert start.returncode != 0
    assert props["ActiveState"] == "failed" and props["Result"] == "exit-code" and props["ExecMainStatus"] == "2"
    assert props["ActiveEnterTimestampMonotonic"] == "0", "it was never active"
    assert props["NRestarts"] == "0", "exit status 2 is not restarted"
    assert "run `outbox-mailer migrate`" in journal

    # 2. Migrate, start: activating until READY, then active.
    migrated = installed.cli("migrate", env=base_env(OUTBOX_MAILER_DATABASE_URL=url))
    assert migrated.returncode == 0, migrated.stderr
    machine.systemctl("reset-failed", UNIT)
    assert machine.systemctl("start", "--no-block", UNIT).returncode == 0
    states: list[str] = []

    def became_active() -> bool:
        p = machine.show(UNIT, "ActiveState", "SubState")
        state = f"{p['ActiveState']}/{p['SubState']}"
        if not states or states[-1] != state:
            states.append(state)
        return p["ActiveState"] in ("active", "failed")

    wait_until(became_active, 60, "the unit to become active", interval=0.02)
    props = machine.show(UNIT, "ActiveState", "StatusText", "MainPID", "ExecMainStartTimestampMonotonic",
                         "ActiveEnterTimestampMonotonic", "WatchdogUSec")
    say(f"states seen while starting: {' -> '.join(states)}")
    say(f"READY: {props}")
    # (the first poll may still see the unit inactive, before the queued start job runs)
    assert states[-1] == "active/running" and "activating/start" in states, states
    assert not any(s.startswith("active") for s in states[:states.index("activating/start")]), states
    assert props["StatusText"].startswith("sent 0, failed 0"), "STATUS= came with READY=1"
    assert props["WatchdogUSec"] == "3s", "the test drop-in lowered WatchdogSec"
    ready_after = (int(props["ActiveEnterTimestampMonotonic"]) - int(props["ExecMainStartTimestampMonotonic"])) / 1e6
    say(f"active {ready_after:.3f}s after the main process started")
    journal = machine.journal(UNIT)
    assert "started worker=" in journal

    # 3. A row is delivered, over AUTH with the password that exists only as a credential.
    insert(url, "nspawn-1")
    wait_until(lambda: status_of(url, "nspawn-1") == "sent", 30, "row nspawn-1 to be sent")
    assert len(server.accepted) == 1
    assert auth.attempts and all(ok for _, ok in auth.attempts), auth.attempts
    worker = query(url, "SELECT worker FROM email_delivery_attempts")
    say(f"delivered nspawn-1 by worker {worker}; SMTP AUTH attempts {auth.attempts}")
    assert worker.startswith(f"{machine.hostname}:")
    env_text = (machine.config / "outbox-mailer.env").read_text()
    assert SMTP_PASSWORD not in env_text

    # 4. A wedged loop: the watchdog kills it and systemd restarts it.
    before = machine.show(UNIT, "NRestarts", "MainPID")
    machine.run("touch", WEDGE_FILE, check=True)
    wait_until(lambda: int(machine.show(UNIT, "NRestarts")["NRestarts"]) > int(before["NRestarts"]), 30,
               "a watchdog restart")
    machine.run("rm", "-f", WEDGE_FILE, check=True)
    journal = machine.journal(UNIT)
    timeout_lines = [line for line in journal.splitlines() if "Watchdog timeout" in line or "SIGABRT" in line
                     or "result 'watchdog'" in line or "wedge" in line]
    for line in timeout_lines[:5]:
        say("journal: " + line)
    assert "Watchdog timeout (limit 3s)!" in journal
    assert "Failed with result 'watchdog'" in journal
    wait_until(lambda: machine.show(UNIT, "ActiveState")["ActiveState"] == "active"
               and machine.show(UNIT, "MainPID")["MainPID"] not in ("0", before["MainPID"]), 30,
               "the restarted service to be active")
    after = machine.show(UNIT, "NRestarts", "MainPID", "ActiveState")
    say(f"watchdog: before {before}, after {after}")
    # journald took the <N> prefixes: the ERROR about the wedge passes -p warning, INFO does not.
    warnings = machine.run("journalctl", "--no-pager", "-b", "-u", UNIT, "-p", "warning", "-o", "cat").stdout
    assert "debug_wedge_file" in warnings and "started worker=" not in warnings
    insert(url, "nspawn-2")
    wait_until(lambda: status_of(url, "nspawn-2") == "sent", 30, "row nspawn-2 to be sent after the restart")

    # 5. systemctl stop drains an in-flight send and the main process exits 0.
    server.delay("DATA", 3.0)
    insert(url, "nspawn-3")
    wait_until(lambda: status_of(url, "nspawn-3") == "sending", 30, "row nspawn-3 to be in flight")
    started = time.monotonic()
    stop = machine.systemctl("stop", UNIT, timeout=90)
    took = time.monotonic() - started
    props = machine.show(UNIT, "ActiveState", "Result", "ExecMainStatus", "ExecMainCode")
    journal = machine.journal(UNIT)
    say(f"stop: systemctl exit {stop.returncode} after {took:.1f}s; {props}; nspawn-3 is {status_of(url, 'nspawn-3')}")
    for line in journal.splitlines():
        if any(s in line for s in ("draining", "in-flight", "stopped worker", "Deactivated", "Stopped")):
            say("journal: " + line)
    assert stop.returncode == 0
    assert props["ActiveState"] == "inactive" and props["Result"] == "success" and props["ExecMainStatus"] == "0"
    assert status_of(url, "nspawn-3") == "sent", "the in-flight send finished during the drain"
    assert "received SIGTERM: draining" in journal
    assert 1.0 < took < 45, "it waited for the send, well inside TimeoutStopSec"
    assert SMTP_PASSWORD not in machine.run("journalctl", "--no-pager", "-b", "-o", "cat").stdout


def test_template_instance_with_its_own_settings_and_credentials(
    machine: Machine, db_url: str, smtp_with_auth: tuple[SmtpTestServer, AuthLog], tmp_path: Path,
    installed: Installed,
) -> None:
    server, auth = smtp_with_auth
    problem = credentials_are_read_like_systemd_passes_them(tmp_path, installed)
    assert problem is None, problem
    unit = "outbox-mailer@billing.service"
    # Shared file points nowhere useful; the instance's own file wins.
    (machine.config / "outbox-mailer.env").write_text(env_file(server, OUTBOX_MAILER_SMTP__PORT="1"))
    (machine.config / "billing.env").write_text(f"OUTBOX_MAILER_SMTP__PORT={server.port}\n")
    machine.credential("outbox-mailer@billing.database_url", db_url)
    machine.credential("outbox-mailer@billing.smtp__password", SMTP_PASSWORD)
    try:
        start = machine.systemctl("start", unit, timeout=90)
        assert start.returncode == 0, machine.journal(unit)
        insert(db_url, "billing-1")
        wait_until(lambda: status_of(db_url, "billing-1") == "sent", 30, "row billing-1 to be sent")
        worker = query(db_url, "SELECT worker FROM email_delivery_attempts")
        say(f"template: {unit} delivered billing-1 as worker {worker}")
        assert worker == f"{machine.hostname}:billing"
        assert auth.attempts and all(ok for _, ok in auth.attempts)
    finally:
        machine.systemctl("stop", unit, timeout=90)
    props = machine.show(unit, "ExecMainStatus", "Result")
    assert props == {"ExecMainStatus": "0", "Result": "success"}, props

