"""The processes a measurement starts: smtp-sink, worker scripts, `outbox-mailer run` daemons.

Everything here listens on or connects to 127.0.0.1 only, is bounded in time, and is stopped by
the PID it was started with (never by name).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import common
from common import BENCH_DIR

PY = sys.executable


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def stop_process(proc: subprocess.Popen, *, group: bool = False, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout``: the process we started (or its process group)."""
    if proc.poll() is not None:
        return
    kill = (lambda sig: os.killpg(proc.pid, sig)) if group else proc.send_signal
    with contextlib.suppress(ProcessLookupError):
        kill(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            kill(signal.SIGKILL)
        proc.wait(timeout=5)


class SmtpSink:
    """Postfix's smtp-sink on 127.0.0.1, bounded by `timeout`, killed by PID at the end."""

    def __init__(self, binary: str, lifetime_seconds: int) -> None:
        self.binary, self.lifetime = binary, lifetime_seconds
        self.port = common.free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> SmtpSink:
        cmd = ["timeout", "-s", "KILL", str(self.lifetime), self.binary]
        if os.geteuid() == 0:
            cmd += ["-u", "nobody"]
        cmd += [f"127.0.0.1:{self.port}", "1024"]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        common.wait_port(self.port)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            # the process group holds `timeout` and smtp-sink; both started by us
            stop_process(self.proc, group=True, timeout=5)


class ScriptServer:
    """A bench/ server script (relay_sink.py, api_sink.py) on a free loopback port, for a with-block.

    The script gets ``PORT`` as its first argument and a lifetime after which it exits by itself.
    """

    def __init__(self, script: str, args: list[str], lifetime_seconds: float, log_path: Path) -> None:
        self.port = common.free_port()
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115  (the process writes to it until stop() closes it)
        self.proc = subprocess.Popen([PY, str(BENCH_DIR / script), str(self.port), *args, str(lifetime_seconds)],
                                     stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     cwd=str(BENCH_DIR))

    def __enter__(self) -> ScriptServer:
        try:
            common.wait_port(self.port, timeout=20)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        stop_process(self.proc)
        self._log.close()


async def run_worker(args: list[str], *, timeout: float = 600, profile: str | None = None,
                     stderr_path: str | None = None) -> dict[str, object]:
    cmd = [PY, *args]
    if profile:
        cmd = [py_spy(), "record", "--idle", "-f", "raw", "-r", "100", "-o", profile, "--", *cmd]
    err = open(stderr_path, "wb") if stderr_path else subprocess.DEVNULL  # noqa: SIM115  (closed in finally)
    try:
        proc = await asyncio.create_subprocess_exec(*cmd, stdout=subprocess.PIPE, stderr=err, cwd=str(BENCH_DIR))
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise RuntimeError(f"worker {args[0]} did not finish within {timeout:g} s") from None
    finally:
        if stderr_path:
            err.close()
    if proc.returncode != 0:
        tail = Path(stderr_path).read_text(errors="replace")[-3000:] if stderr_path else ""
        raise RuntimeError(f"worker {args} exited {proc.returncode}\n{tail}")
    return common.parse_result(out.decode(errors="replace"))


def py_spy() -> str:
    candidate = Path(PY).parent / "py-spy"
    found = str(candidate) if candidate.exists() else shutil.which("py-spy")
    if not found:
        sys.exit("--profile needs py-spy (pip install py-spy)")
    return found


class DaemonExited(RuntimeError):
    """The daemon exited before it started (a refused setting exits 2); ``log`` holds its stderr."""

    def __init__(self, returncode: int, log: str) -> None:
        last = next((ln.strip() for ln in reversed(log.splitlines()) if ln.strip()), "no output")
        super().__init__(f"daemon exited {returncode}: {last[:300]}\n{log[-3000:]}")
        self.returncode, self.log = returncode, log


class DaemonProcess:
    """`python -m outbox_mailer run` as a real user runs it, configured by environment.

    ``concurrency`` None: 4 x the pool (a send per connection and the next three ready), 0: the
    daemon's default; ``pool`` 0: the daemon's default pool size; ``extra_env``: more settings.
    """

    def __init__(self, url: str, smtp_port: int, pool: int, name: str, log_level: str, workdir: Path,
                 profile: str | None = None, *, concurrency: int | None = None,
                 extra_env: dict[str, str] | None = None) -> None:
        self.log_path = workdir / f"{name}.log"
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("OUTBOX_MAILER_") and k not in ("NOTIFY_SOCKET", "JOURNAL_STREAM")}
        env.update({
            "OUTBOX_MAILER_DATABASE_URL": url,
            "OUTBOX_MAILER_DEFAULT_FROM": common.DEFAULT_FROM,
            "OUTBOX_MAILER_SMTP__HOST": "127.0.0.1",
            "OUTBOX_MAILER_SMTP__PORT": str(smtp_port),
            "OUTBOX_MAILER_SMTP__TLS": "none",
            "OUTBOX_MAILER_SMTP__HELO_NAME": "bench.example.com",
            "OUTBOX_MAILER_RESCUE_INTERVAL_SECONDS": "3600",
            "OUTBOX_MAILER_WORKER_NAME": name,
        })
        if pool:
            env["OUTBOX_MAILER_SMTP__POOL_SIZE"] = str(pool)
        if concurrency is None:
            concurrency = 4 * pool
        if concurrency:
            env["OUTBOX_MAILER_CONCURRENCY"] = str(concurrency)
        env.update(extra_env or {})
        cmd = [PY, "-m", "outbox_mailer", "--log-level", log_level, "run"]
        if profile:
            cmd = [py_spy(), "record", "--idle", "-f", "raw", "-r", "100", "-o", profile, "--", *cmd]
        self._log = open(self.log_path, "wb")  # noqa: SIM115  (the daemon writes to it until stop() closes it)
        self.proc = subprocess.Popen(cmd, env=env, cwd=str(workdir), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=self._log)
        self.pid = self.proc.pid

    def wait_started(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._log.close()
                raise DaemonExited(self.proc.returncode, self.log_path.read_text(errors="replace"))
            if b"started worker=" in self.log_path.read_bytes():
                return
            time.sleep(0.05)
        raise RuntimeError(f"daemon not started after {timeout:g} s:\n{self.log_path.read_text()[-3000:]}")

    def python_pid(self) -> int:
        """The daemon's own PID (under py-spy, its child)."""
        try:
            children = Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text().split()
        except OSError:
            children = []
        return int(children[0]) if children and "py-spy" in " ".join(self.proc.args) else self.pid

    def cpu_seconds(self) -> float:
        return common.cpu_seconds(self.python_pid())

    def stop(self, timeout: float = 30.0) -> tuple[float, float]:
        """SIGTERM (the daemon drains and exits 0), SIGKILL after ``timeout``; returns (RSS, peak RSS) in MB
        just before."""
        rss = common.rss_mb(self.python_pid())
        if self.proc.poll() is None:
            os.kill(self.python_pid(), signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()
        return rss

    def __enter__(self) -> DaemonProcess:
        try:
            self.wait_started()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Daemons:
    """N `outbox-mailer run` processes sharing the table, for the duration of a with-block."""

    def __init__(self, db, cfg, sink_port: int, processes: int, pool: int, key: str, workdir: Path,
                 profile: str | None = None) -> None:
        self.procs = [DaemonProcess(db.url, sink_port, pool, f"{key}-{i}", cfg.log_level, workdir,
                                    profile=profile if i == 0 else None) for i in range(processes)]
        self.rss: list[tuple[float, float]] = []
        self.cpu_us: list[float] = []  # daemon CPU per email, summed over the processes, per measured run

    def cpu_seconds(self) -> float:
        return sum(d.cpu_seconds() for d in self.procs)

    def __enter__(self) -> Daemons:
        try:
            for d in self.procs:
                d.wait_started()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.rss = [d.stop() for d in self.procs]
