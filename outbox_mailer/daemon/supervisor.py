"""``outbox-mailer run --processes N``: N daemon processes under one parent.

One Python process tops out near one core, so a host runs several daemons;
they share the work through the database like daemons on different hosts.
The parent starts N children (``python -m outbox_mailer ... run``) and speaks
for them to systemd: each child notifies the parent's own datagram socket;
the parent sends ``READY=1`` once every child is ready, ``WATCHDOG=1`` only
while every child keeps pinging, a combined ``STATUS=``, and ``STOPPING=1``.
SIGTERM/SIGINT go to every child; the parent exits 0 when all exit 0. If a
child dies, the others are stopped and the parent exits with its failure, so
the service manager restarts the whole group.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..serving.systemd import SystemdNotifier


@dataclass
class Child:
    index: int
    process: subprocess.Popen[bytes]
    ready: bool = False
    last_ping: float = field(default_factory=time.monotonic)
    status: str = ""


def child_command(global_args: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "outbox_mailer", *global_args, "run"]


def supervise(processes: int, global_args: Sequence[str], notifier: SystemdNotifier | None = None,
              worker_name: str | None = None, metrics_address: str | None = None) -> int:
    """Run the children until they all exit; returns the exit code for the group."""
    notifier = notifier or SystemdNotifier()
    stop: dict[str, int | None] = {"signal": None}

    def on_signal(signum: int, _frame: object) -> None:
        stop["signal"] = signum

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    workdir = Path(tempfile.mkdtemp(prefix="outbox-mailer-"))
    sock_path = workdir / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    sock.bind(str(sock_path))
    base = worker_name or f"{socket.gethostname()}:{os.getpid()}"
    children: list[Child] = []
    try:
        for i in range(processes):
            env = {k: v for k, v in os.environ.items() if k != "WATCHDOG_PID"}
            env["NOTIFY_SOCKET"] = str(sock_path)
            env["OUTBOX_MAILER_WORKER_NAME"] = f"{base}/{i}"
            if metrics_address:  # child i serves metrics on port + i
                host, port = metrics_address.rsplit(":", 1)
                env["OUTBOX_MAILER_METRICS_ADDRESS"] = f"{host}:{int(port) + i}"
            children.append(Child(i, subprocess.Popen(child_command(global_args), env=env)))
        return _loop(children, sock, notifier, stop)
    finally:
        for child in children:
            if child.process.poll() is None:
                child.process.kill()
                child.process.wait()
        sock.close()
        with contextlib.suppress(OSError):
            sock_path.unlink()
            workdir.rmdir()
        for s, handler in previous.items():
            signal.signal(s, handler)


def _loop(children: list[Child], sock: socket.socket, notifier: SystemdNotifier, stop: dict[str, int | None]) -> int:
    ready_sent = stopping = False
    interval = notifier.watchdog_interval_seconds
    last_forward = time.monotonic()
    while True:
        if stop["signal"] is not None and not stopping:
            stopping = True
            notifier.stopping(f"stopping {len(children)} processes")
            for child in children:
                if child.process.poll() is None:
                    child.process.send_signal(stop["signal"])
        readable, _, _ = select.select([sock], [], [], 0.2)
        if readable:
            _receive(children, *_receive_from(sock))
        codes = [child.process.poll() for child in children]
        if all(code is not None for code in codes):
            return next((code for code in codes if code), 0)
        failed = next((c for c, code in zip(children, codes, strict=True) if code not in (None, 0)), None)
        if failed is not None and not stopping:
            print(f"outbox-mailer: process {failed.index} exited with {codes[failed.index]}; stopping the others",
                  file=sys.stderr)
            stop["signal"] = signal.SIGTERM
            continue
        if not ready_sent and all(child.ready for child in children):
            ready_sent = notifier.ready(_status(children)) or True
        now = time.monotonic()
        if (interval is not None and ready_sent and not stopping and now - last_forward >= interval
                and all(now - child.last_ping < 2 * interval for child in children)):
            notifier.watchdog()  # every child is turning its loop
            notifier.status(_status(children))
            last_forward = now


def _receive_from(sock: socket.socket) -> tuple[int, bytes]:
    """One datagram and the sender's pid, from the kernel (SCM_CREDENTIALS), as systemd does it."""
    data, ancillary, _, _ = sock.recvmsg(65536, socket.CMSG_SPACE(struct.calcsize("3i")))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            pid, _uid, _gid = struct.unpack("3i", payload[: struct.calcsize("3i")])
            return pid, data
    return 0, data


def _receive(children: list[Child], pid: int, datagram: bytes) -> None:
    fields = dict(line.split("=", 1) for line in datagram.decode("utf-8", "replace").splitlines() if "=" in line)
    for child in children:
        if child.process.pid == pid:
            _apply(child, fields)


def _apply(child: Child, fields: dict[str, str]) -> None:
    if fields.get("READY") == "1":
        child.ready = True
    if "STATUS" in fields:
        child.status = fields["STATUS"]
    child.last_ping = time.monotonic()


def _status(children: list[Child]) -> str:
    return f"{len(children)} processes; " + " | ".join(c.status or "starting" for c in children)
