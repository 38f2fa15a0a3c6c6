"""The soak (issue 16, item 8): its shortest run, 75 s of mixed faults, against the installed daemon.

``python -m bench.soak --minutes 1.25`` with a fixed seed runs the built wheel's ``outbox-mailer``
(``--cli``) against its own throwaway PostgreSQL and SMTP sink, injecting SMTP drops and
outages, PostgreSQL restarts (fast and immediate) and kill -9; it must exit 0 with a verdict of
no loss, no growth, connections within bounds and duplicates explained. 75 s is the shortest run
whose plan still has every kind of fault and a last daemon lifetime long enough to judge growth
(bench/soak_plan.py, SHORTEST_SECONDS); longer soaks are bench/soak.py's (bench/README.md, "Soak").
The verdict itself is a pure function: the fast tests below show it fails on a synthetic series
that grows or loses a row.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.soak_plan import LAST_LIFETIME_SECONDS, SHORTEST_SECONDS, plan_faults
from bench.soak_verdict import LIMITS, judge
from tests.e2e.conftest import ROOT, Installed, base_env

SEED = 16  # at 75 s: kill -9, an SMTP drop window, PostgreSQL restarted immediate then fast (twice), two outages


def test_shortest_soak_loses_nothing_grows_nothing_and_every_fault_kind_happens(
    installed: Installed, tmp_path: Path
) -> None:
    out = tmp_path / "soak.json"
    run = subprocess.run(
        [sys.executable, "-m", "bench.soak", "--minutes", f"{SHORTEST_SECONDS / 60:g}", "--seed", str(SEED),
         "--json", str(out), "--cli", str(installed.bin / "outbox-mailer")],
        check=False, cwd=ROOT, env=base_env(), capture_output=True, text=True, timeout=420,
    )  # fmt: skip
    tail = (run.stdout[-6000:] + run.stderr[-3000:])
    print(tail)
    assert run.returncode == 0, tail
    result = json.loads(out.read_text())
    verdict = result["verdict"]
    assert verdict["ok"] and verdict["failures"] == [], verdict["failures"]
    assert verdict["loss"] == 0 and verdict["delivery"]["lost_keys"] == []
    assert verdict["delivery"]["committed"] > 1000  # 20 rows/s for 75 s, PostgreSQL down at times
    assert verdict["delivery"]["unexplained_duplicates"] == []
    assert verdict["delivery"]["extra_copies"] <= verdict["delivery"]["duplicate_bound"]
    assert verdict["growth"]["failures"] == [] and verdict["connections"]["failures"] == []
    assert verdict["growth"]["lifetimes"][-1]["judged"]
    for kind in ("smtp_drop", "smtp_outage", "pg_restart", "pg_restart_immediate", "kill9"):
        assert result["fault_counts"].get(kind, 0) >= 1, (kind, result["fault_counts"])
    assert result["sink"]["drops"].get("BODY", 0) >= 1  # at least one drop left the daemon in doubt
    assert result["final_status"] == {"sent": verdict["delivery"]["committed"]}
    assert len(result["lifetimes"]) >= 2 and all(life["end"] in ("kill9", "sigterm") for life in result["lifetimes"])


# ---- the verdict on synthetic series (fast) -------------------------------------------------


def series(rss_mb: Any, *, seconds: int = 120, pid: int = 100, fds: Any = 12, start: int = 0) -> list[dict[str, Any]]:
    """Samples every 2 s; ``rss_mb`` and ``fds`` are functions of t (or constants)."""
    def at(value: Any, t: int) -> Any:
        return value(t) if callable(value) else value

    return [{"t": float(t), "pid": pid, "rss_kib": int(at(rss_mb, t) * 1024), "fds": at(fds, t), "pg_sockets": 2,
             "pg_backends": 2, "smtp_sockets": 4} for t in range(start, start + seconds + 1, 2)]


def delivery(n: int = 100, **changes: Any) -> dict[str, Any]:
    keys = [f"k{i}" for i in range(n)]
    base = {"committed": {k: 1.0 for k in keys}, "status": {k: "sent" for k in keys},
            "copies": {k: 1 for k in keys}, "ambiguous": {}, "duplicate_bound": 0, "end": 200.0}
    base.update(changes)
    return base


def test_the_verdict_passes_a_flat_series_with_duplicates_explained_by_in_doubt_events() -> None:
    copies = {**delivery()["copies"], "k1": 2, "k2": 3}
    verdict = judge(series(lambda t: 52 + (3 if t < 20 else 0)), 120, delivery(copies=copies,
                    ambiguous={"k1": 1, "k2": 2}, duplicate_bound=3), [])  # fmt: skip
    assert verdict["ok"], verdict["failures"]
    assert verdict["delivery"]["extra_copies"] == 3


def test_the_verdict_fails_on_memory_growth_within_the_last_lifetime() -> None:
    grows = series(lambda t: 50 + t * 0.25)  # 50 -> 80 MB over two minutes
    verdict = judge(grows, 120, delivery(), [])
    assert not verdict["ok"]
    assert any("RSS" in failure for failure in verdict["failures"]), verdict["failures"]
    # slow growth under the thresholds (5 MB) passes; so does a restart that resets RSS
    assert judge(series(lambda t: 50 + t * 0.04), 120, delivery(), [])["ok"]
    restarted = series(lambda t: 50 + t, seconds=30, pid=1) + series(52, start=32, pid=2)
    assert judge(restarted, 152, delivery(), [])["ok"]


def test_the_verdict_fails_on_fd_growth_too_many_connections_and_a_short_last_lifetime() -> None:
    assert any("fds" in f for f in judge(series(52, fds=lambda t: 10 + t // 4), 120, delivery(), [])["failures"])
    too_many = series(52)
    too_many[30]["pg_backends"] = LIMITS["pg_connections"] + 1
    assert not judge(too_many, 120, delivery(), [])["ok"]
    short = series(52, pid=1) + series(52, seconds=20, start=122, pid=2)
    assert any("too short" in f for f in judge(short, 142, delivery(), [])["failures"])


def test_the_verdict_fails_on_a_lost_row_and_on_unexplained_duplicates() -> None:
    flat = series(52)
    pending = delivery(status={**delivery()["status"], "k7": "pending"})
    verdict = judge(flat, 120, pending, [])
    assert not verdict["ok"] and verdict["loss"] == 1 and verdict["delivery"]["lost_keys"] == ["k7"]
    missing = delivery(status={k: v for k, v in delivery()["status"].items() if k != "k3"})
    assert judge(flat, 120, missing, [])["delivery"]["lost_by_reason"] == {"missing": 1}
    never_received = delivery(copies={**delivery()["copies"], "k4": 0})
    assert judge(flat, 120, never_received, [])["delivery"]["lost_by_reason"] == {"sent_not_delivered": 1}
    # a row committed within the rescue delay + margin of the end is not judged
    late = delivery(committed={**delivery()["committed"], "k7": 190.0},
                    status={**delivery()["status"], "k7": "pending"})
    assert judge(flat, 120, late, [])["ok"]
    twice = delivery(copies={**delivery()["copies"], "k5": 2}, duplicate_bound=5)
    assert not judge(flat, 120, twice, [])["ok"]  # no in-doubt event recorded for k5
    over_bound = delivery(copies={**delivery()["copies"], "k5": 2}, ambiguous={"k5": 1}, duplicate_bound=0)
    assert not judge(flat, 120, over_bound, [])["ok"]
    assert not judge(flat, 120, delivery(), ["daemon soak-1 exited by itself with 1"])["ok"]


def test_the_fault_plan_is_seeded_has_every_kind_and_kills_only_in_the_first_40_percent() -> None:
    for seconds in (120, SHORTEST_SECONDS):
        kills_before = min(seconds * 0.4, seconds - LAST_LIFETIME_SECONDS)  # 48 s of 120; 10 s of 75
        for seed in range(20):
            plan = plan_faults(seed, seconds)
            assert plan == plan_faults(seed, seconds)
            kinds = {step["kind"] for step in plan}
            assert kinds == {"smtp_drop", "smtp_outage", "pg_restart", "kill9"}, (seed, plan)
            assert any(step.get("mode") == "immediate" for step in plan)
            assert all(step["t"] < kills_before for step in plan if step["kind"] == "kill9")
