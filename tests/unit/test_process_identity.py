"""Provably dead, strictly (processes.py): a fake /proc for every case a wrong guess could hide in."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from outbox_mailer.store.processes import ProcessIdentity, dead_workers, provably_dead, start_ticks

ME = ProcessIdentity("boot-a", "pid:[1]", 100, 5000)
NO_SUCH_PID = 4_000_000  # above Linux's pid_max ceiling (2^22): never a process


def fake_proc(tmp_path: Path, processes: dict[int, int], comm: str = "outbox-mailer") -> Path:
    """/proc with a stat file per pid: start ticks in field 22, after a comm that may hold ') ('."""
    for pid, ticks in processes.items():
        (tmp_path / str(pid)).mkdir()
        fields = ["S", "1"] + ["0"] * 17 + [str(ticks), "0", "0"]  # fields 3..24
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({comm}) {' '.join(fields)}\n")
    return tmp_path


def test_start_ticks_reads_field_22_past_a_comm_holding_parentheses_and_spaces(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, {7: 123456}, comm="a) (b c")
    assert start_ticks(7, proc) == 123456
    assert start_ticks(8, proc) is None


def test_start_ticks_of_this_process_is_what_the_kernel_says() -> None:
    stat = Path(f"/proc/{os.getpid()}/stat").read_text()
    assert start_ticks(os.getpid()) == int(stat.rsplit(")", 1)[1].split()[19])


@pytest.mark.parametrize(("other", "processes", "dead"), [
    (dataclasses.replace(ME, pid=NO_SUCH_PID), {}, True),  # no such pid here, and the kernel agrees
    (dataclasses.replace(ME, pid=os.getpid()), {}, False),  # hidden from /proc (hidepid) but alive
    (dataclasses.replace(ME, pid=200), {200: 9999}, True),  # the pid is another process now (other start)
    (dataclasses.replace(ME, pid=200), {200: 5000}, False),  # alive
    (dataclasses.replace(ME, pid=NO_SUCH_PID, boot_id="boot-b"), {}, False),  # another boot: another host, or before a reboot
    (dataclasses.replace(ME, pid=NO_SUCH_PID, pid_ns="pid:[2]"), {}, False),  # a container: its pids are not ours to look up
    (ME, {}, False),  # this process itself
])  # fmt: skip
def test_provably_dead_only_in_this_boot_and_pid_namespace_with_no_such_process(
        tmp_path: Path, other: ProcessIdentity, processes: dict[int, int], dead: bool) -> None:
    assert provably_dead(other, ME, fake_proc(tmp_path, processes)) is dead


def test_a_stat_file_that_cannot_be_read_is_not_proof(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, {})
    (proc / "200").mkdir()
    (proc / "200" / "stat").write_text("garbage without the parenthesis")
    assert provably_dead(dataclasses.replace(ME, pid=200), ME, proc) is False


def test_a_worker_is_dead_only_when_every_process_of_it_is(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, {300: 1})
    gone = dataclasses.replace(ME, pid=NO_SUCH_PID)
    alive = dataclasses.replace(ME, pid=300, start_ticks=1)
    elsewhere = dataclasses.replace(ME, pid=NO_SUCH_PID, boot_id="boot-b")
    known = [("restarted", gone), ("restarted", ME),  # this process took over the name: the old one is dead
             ("two", gone), ("two", alive),  # one of its processes lives
             ("spread", gone), ("spread", elsewhere),  # one runs on another host
             ("me", ME)]  # only this process
    assert dead_workers(known, ME, proc) == ["restarted"]
