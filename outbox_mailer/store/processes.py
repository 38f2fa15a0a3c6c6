"""Who a daemon process is, and whether another one is provably dead (instant recovery, schema 13).

A claim of a process that is gone is rescued after the rescue delay, because from another host
"its advisory locks are free" cannot tell a dead process from a live one whose session was lost
mid-send. On the same host it can be told, strictly: a process is provably dead when it ran in
this daemon's own boot (``/proc/sys/kernel/random/boot_id``) and pid namespace
(``/proc/self/ns/pid``) and no process with its pid and start time exists (a pid reused by
another program has another start time). A container on the same host, with a pid namespace of
its own, is another host here. A wrong guess would send twice, so every doubt (no /proc, an
unreadable file) answers "not provably dead".
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class ProcessIdentity:
    boot_id: str
    pid_ns: str
    pid: int
    start_ticks: int  # clock ticks after boot at which the process started (/proc/<pid>/stat, field 22)


def start_ticks(pid: int, proc: Path = PROC) -> int | None:
    """The start time of process ``pid`` as this pid namespace sees it; None when /proc shows none
    (which alone is no proof: /proc may hide other users' processes, see :func:`provably_dead`)."""
    try:
        stat = (proc / str(pid) / "stat").read_text("ascii", errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ")"
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[19])  # field 22 counted from 1; fields[0] is field 3


def this_process(proc: Path = PROC) -> ProcessIdentity | None:
    """This process's identity; None where /proc cannot say (then nothing is ever provably dead)."""
    try:
        boot_id = (proc / "sys/kernel/random/boot_id").read_text("ascii").strip()
        pid_ns = os.readlink(proc / "self/ns/pid")
        pid = os.getpid()
        if proc == PROC and os.readlink(proc / "self") != str(pid):
            return None  # a /proc of another pid namespace (unshare --pid without its own /proc)
        ticks = start_ticks(pid, proc)
    except (OSError, ValueError, IndexError):
        return None
    if ticks is None:
        return None
    return ProcessIdentity(boot_id, pid_ns, pid, ticks)


def provably_dead(other: ProcessIdentity, me: ProcessIdentity, proc: Path = PROC) -> bool:
    if other == me or other.boot_id != me.boot_id or other.pid_ns != me.pid_ns:
        return False
    try:
        ticks = start_ticks(other.pid, proc)
    except (OSError, ValueError, IndexError):
        return False
    if ticks is not None:
        return ticks != other.start_ticks  # the pid is another process now, or the same one alive
    return no_such_pid(other.pid)


def no_such_pid(pid: int) -> bool:
    """Asked of the kernel, since /proc hides other users' processes (hidepid, systemd's
    ProtectProc=invisible): signal 0 fails with ESRCH only when no process has that pid here;
    EPERM means one exists that is not ours to signal."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def dead_workers(known: list[tuple[str, ProcessIdentity]], me: ProcessIdentity, proc: Path = PROC) -> list[str]:
    """The workers (claimed_by names) whose every known process is provably dead or this one, with
    at least one provably dead: their claims other than this process's own are claims of the dead.
    A worker with a process of another host, or one alive here, keeps the rescue delay."""
    verdicts: dict[str, list[bool]] = {}
    for worker, process in known:
        if process != me:
            verdicts.setdefault(worker, []).append(provably_dead(process, me, proc))
    return sorted(worker for worker, dead in verdicts.items() if dead and all(dead))
