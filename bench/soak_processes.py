"""The processes a soak runs and watches: the daemon (one at a time, every lifetime recorded,
stopped by its PID), its figures from /proc, and PostgreSQL's restart by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any


def proc_figures(pid: int, pg_port: int, smtp_port: int) -> dict[str, Any]:
    """VmRSS, open fds, and the process's TCP sockets to PostgreSQL and to the sink (local ports)."""
    out: dict[str, Any] = {"rss_kib": None, "fds": None, "pg_sockets": None, "smtp_sockets": None, "pg_ports": []}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out["rss_kib"] = int(line.split()[1])
        inodes = set()
        fds = os.listdir(f"/proc/{pid}/fd")
        for fd in fds:
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        out["fds"] = len(fds)
        pg, smtp = [], 0
        for table in ("tcp", "tcp6"):
            with contextlib.suppress(OSError):
                for row in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                    cols = row.split()
                    if len(cols) > 9 and cols[9] in inodes:
                        local, remote = int(cols[1].rsplit(":", 1)[1], 16), int(cols[2].rsplit(":", 1)[1], 16)
                        if remote == pg_port:
                            pg.append(local)
                        elif remote == smtp_port:
                            smtp += 1
        out.update(pg_sockets=len(pg), smtp_sockets=smtp, pg_ports=pg)
    except OSError:
        pass
    return out


class Daemons:
    """One `outbox-mailer run` at a time; every lifetime recorded; stopped by PID."""

    def __init__(self, command: list[str], env: dict[str, str], workdir: Path, clock: Any) -> None:
        self.command, self.env, self.workdir, self.clock = command, env, workdir, clock
        self.proc: subprocess.Popen[bytes] | None = None
        self.lifetimes: list[dict[str, Any]] = []

    @property
    def current(self) -> dict[str, Any]:
        return self.lifetimes[-1]

    async def start(self) -> None:
        worker = f"soak-{len(self.lifetimes) + 1}"
        log = self.workdir / f"{worker}.log"
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [*self.command, "run"], env={**self.env, "OUTBOX_MAILER_WORKER_NAME": worker},
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=self.workdir,
                start_new_session=True)
        self.lifetimes.append({"worker": worker, "pid": self.proc.pid, "started_t": round(self.clock(), 2),
                               "log": str(log)})
        deadline = time.monotonic() + 30
        while b"started worker=" not in log.read_bytes():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"daemon {worker} did not start (exit {self.proc.poll()}):\n{self.tail()}")
            await asyncio.sleep(0.05)

    def tail(self, lines: int = 30) -> str:
        return "\n".join(Path(self.current["log"]).read_text(errors="replace").splitlines()[-lines:])

    def _ended(self, how: str) -> None:
        assert self.proc is not None
        self.current.update(ended_t=round(self.clock(), 2), end=how, exit_code=self.proc.returncode)

    def exited_by_itself(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None and "end" not in self.current:
            self._ended("exited")
            return True
        return False

    def kill9(self) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._ended("kill9")

    def terminate(self, timeout: float = 40) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            return None
        self._ended("sigterm")
        return self.proc.returncode


def restart_postgres(pg: Any, mode: str, down: float) -> None:
    """pg_ctl's restart by hand on TemporaryPostgres's own postmaster: SIGINT is ``-m fast``, SIGQUIT
    ``-m immediate`` (the postmaster removes postmaster.pid either way), then the same command again."""
    proc = pg._process
    proc.send_signal(signal.SIGINT if mode == "fast" else signal.SIGQUIT)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
    pg._process = None
    time.sleep(down)
    pg._launch()
