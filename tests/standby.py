"""A streaming standby of a throwaway primary, for failover tests.

Given a running :class:`~outbox_mailer.devtools.pgcluster.TemporaryPostgres` (the primary),
:class:`StreamingStandby` copies it with ``pg_basebackup -R`` into a fresh temporary
directory, starts the copy as a hot standby on a free loopback port, names it in the
primary's ``synchronous_standby_names`` and waits until ``pg_stat_replication`` reports
it ``streaming`` and ``sync``. It can promote the standby and stops what it started::

    with TemporaryPostgres(extra_settings=SYNC_PRIMARY_SETTINGS) as primary, \\
            StreamingStandby(primary) as standby:
        ...                          # every commit on the primary is on the standby too
        stop_immediate(primary)      # pg_ctl stop -m immediate: a crash, no shutdown checkpoint
        standby.promote()            # pg_ctl promote -w: read-write from here on

Synchronous replication needs ``synchronous_commit`` on at the primary, and
TemporaryPostgres's fast mode turns it off: start the primary with
``extra_settings=SYNC_PRIMARY_SETTINGS`` (a ``-c`` given later wins), or the standby
refuses to start. ``synchronous_standby_names`` is set with ALTER SYSTEM only after the
base backup, so the promoted standby does not itself wait for a standby it does not have.

Like pgcluster.py, when run as root every PostgreSQL program runs as the cluster's
owner (``setpriv`` to the owner of the primary's directory), in a directory under
/tmp that the owner can traverse. Processes are stopped by PID (the ``postgres``
process started here) or by ``pg_ctl`` on their data directory, never by name.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Self

from outbox_mailer.devtools.pgcluster import TemporaryPostgres, find_bindir, log_tail, postmaster_state

PG15_BINDIR = Path("/usr/lib/postgresql/15/bin")
STANDBY_NAME = "outbox_standby"

# For the primary: commits wait for the synchronous standby (TemporaryPostgres's fast mode
# sets synchronous_commit=off, which would let a commit return before the standby has it).
SYNC_PRIMARY_SETTINGS = {"synchronous_commit": "on", "wal_level": "replica", "max_wal_senders": "5"}

# A hot standby needs these at least as high as on its primary; copied from the primary.
_AT_LEAST_PRIMARY = ("max_connections", "max_worker_processes", "max_wal_senders", "max_prepared_transactions",
                     "max_locks_per_transaction")


def bindir() -> Path:
    if (PG15_BINDIR / "pg_basebackup").exists():
        return PG15_BINDIR
    found = find_bindir()
    if found is None or not (found / "pg_basebackup").exists():
        raise RuntimeError("no PostgreSQL server binaries with pg_basebackup found")
    return found


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _owner_prefix(directory: Path) -> list[str]:
    """setpriv to the owner of ``directory`` when we are root (PostgreSQL refuses to run as root)."""
    if os.geteuid() != 0:
        return []
    st = directory.stat()
    return ["setpriv", f"--reuid={st.st_uid}", f"--regid={st.st_gid}", "--init-groups"]


def _run(prefix: list[str], args: list[str], timeout: float = 60) -> str:
    result = subprocess.run(prefix + args, capture_output=True, text=True, timeout=timeout,
                            stdin=subprocess.DEVNULL, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{Path(args[0]).name} failed ({result.returncode}): "
                           f"{result.stderr.strip() or result.stdout.strip()}")
    return result.stdout


def psql(url: str, query: str, timeout: float = 30) -> str:
    """One value (or nothing) from ``query``; RuntimeError when psql fails."""
    return _run([], ["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", url, "-c", query], timeout).strip()


def data_directory(pg: TemporaryPostgres) -> Path:
    if pg.directory is None:
        raise RuntimeError("the primary is not running")
    return pg.directory / "data"


def stop_immediate(pg: TemporaryPostgres, timeout: float = 15) -> None:
    """``pg_ctl stop -m immediate`` on a TemporaryPostgres: every backend killed, no checkpoint (a crash)."""
    datadir = data_directory(pg)
    _run(_owner_prefix(datadir), [str(bindir() / "pg_ctl"), "stop", "-D", str(datadir), "-m", "immediate",
                                  "-w", "-t", str(int(timeout))], timeout + 5)
    process = pg._process  # the postgres process TemporaryPostgres started: reap it
    if process is not None:
        process.wait(timeout=timeout)


class StreamingStandby:
    """A hot standby of ``primary``, synchronous by default; a context manager, or start()/stop()."""

    def __init__(self, primary: TemporaryPostgres, *, name: str = STANDBY_NAME, synchronous: bool = True,
                 timeout: float = 30) -> None:
        self.primary = primary
        self.name = name
        self.synchronous = synchronous
        self.timeout = timeout
        self.directory: Path | None = None
        self.port = 0
        self.user = primary.user
        self._process: subprocess.Popen[bytes] | None = None
        self._prefix: list[str] = []

    # -- addresses ----------------------------------------------------------------

    @property
    def datadir(self) -> Path:
        if self.directory is None:
            raise RuntimeError("the standby is not running")
        return self.directory / "data"

    @property
    def url(self) -> str:
        """The standby's maintenance database (read-only until promoted)."""
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres"

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- life -----------------------------------------------------------------------

    def start(self) -> Self:
        primary_dir = data_directory(self.primary)
        self._prefix = _owner_prefix(primary_dir)
        if self.synchronous and psql(self.primary.url, "SHOW synchronous_commit") == "off":
            raise RuntimeError("the primary runs with synchronous_commit=off, so its commits would not wait for "
                               "the standby: start it with TemporaryPostgres(extra_settings=SYNC_PRIMARY_SETTINGS)")
        minimums = {name: psql(self.primary.url, f"SHOW {name}") for name in _AT_LEAST_PRIMARY}
        self.directory = Path(tempfile.mkdtemp(prefix="outbox-standby-", dir="/tmp"))
        os.chmod(self.directory, 0o755)
        if os.geteuid() == 0:
            st = primary_dir.stat()
            os.chown(self.directory, st.st_uid, st.st_gid)
        try:
            _run(self._prefix, [str(bindir() / "pg_basebackup"), "-D", str(self.datadir), "-h", "127.0.0.1",
                                "-p", str(self.primary.port), "-U", self.user, "-X", "stream", "-c", "fast",
                                "-R", "--no-sync"], timeout=120)
            self.port = _free_port()
            conninfo = (f"host=127.0.0.1 port={self.primary.port} user={self.user} "
                        f"application_name={self.name}")
            command = [str(bindir() / "postgres"), "-D", str(self.datadir), "-p", str(self.port),
                       "-h", "127.0.0.1", "-k", str(self.directory), "-c", "log_min_messages=warning",
                       "-c", f"primary_conninfo={conninfo}", "-c", "hot_standby=on",
                       "-c", "wal_receiver_status_interval=1s",
                       # test-only speed, as TemporaryPostgres's fast mode (nothing here survives a host crash)
                       "-F", "-c", "full_page_writes=off"]
            for name, value in minimums.items():
                command += ["-c", f"{name}={value}"]
            with open(self.directory / "postgres.log", "ab") as log:
                self._process = subprocess.Popen(self._prefix + command, stdout=log, stderr=subprocess.STDOUT,
                                                 stdin=subprocess.DEVNULL, start_new_session=True)
            self._wait_status(("standby", "ready"))
            if self.synchronous:
                psql(self.primary.url, f"ALTER SYSTEM SET synchronous_standby_names = '\"{self.name}\"'")
                psql(self.primary.url, "SELECT pg_reload_conf()")
            self.wait_replicating(sync=self.synchronous)
        except BaseException:
            self.stop()
            raise
        return self

    def replication_state(self) -> tuple[str, str] | None:
        """(state, sync_state) of this standby in the primary's pg_stat_replication, None if absent."""
        row = psql(self.primary.url, f"SELECT state || ' ' || sync_state FROM pg_stat_replication "
                                     f"WHERE application_name = '{self.name}'")
        if not row:
            return None
        state, sync_state = row.split(" ", 1)
        return state, sync_state

    def wait_replicating(self, *, sync: bool = True) -> None:
        """Until the primary reports this standby streaming (and, with ``sync``, synchronous)."""
        wanted = ("streaming", "sync" if sync else "async")
        deadline = time.monotonic() + self.timeout
        state = None
        while time.monotonic() < deadline:
            state = self.replication_state()
            if state == wanted or (not sync and state is not None and state[0] == "streaming"):
                return
            self._check_alive()
            time.sleep(0.05)
        raise RuntimeError(f"standby not {wanted} within {self.timeout:g} s (pg_stat_replication: {state}); "
                           f"log:\n{self.log_tail()}")

    def in_recovery(self) -> bool:
        return psql(self.url, "SELECT pg_is_in_recovery()") == "t"

    def promote(self) -> float:
        """``pg_ctl promote -w``: returns the seconds until the server accepted read-write sessions."""
        started = time.monotonic()
        _run(self._prefix, [str(bindir() / "pg_ctl"), "promote", "-D", str(self.datadir), "-w",
                            "-t", str(int(self.timeout))], self.timeout + 5)
        self._wait_status(("ready",))
        return time.monotonic() - started

    def stop(self) -> None:
        """Fast shutdown of the standby (SIGINT to the postgres process started here, as pg_ctl -m fast
        does), SIGKILL if it is still there after 15 s; then remove its directory."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

    # -- internals ------------------------------------------------------------------

    def _check_alive(self) -> None:
        if self._process is not None and self._process.poll() is not None:
            raise RuntimeError(f"the standby exited with {self._process.returncode}; log:\n{self.log_tail()}")

    def _wait_status(self, wanted: tuple[str, ...]) -> None:
        """postmaster.pid's 8th line, as pg_ctl reads it: 'standby' (hot standby open), 'ready' (primary)."""
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            self._check_alive()
            if postmaster_state(self.datadir) in wanted:
                return
            time.sleep(0.02)
        raise RuntimeError(f"standby not {'/'.join(wanted)} within {self.timeout:g} s; log:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        return log_tail(self.directory, lines)
