"""The soak's verdict (``judge``, a pure function; the soak exits 1 when it fails):

* loss: a committed row (the producer saw its COMMIT succeed) that is missing, or not ``sent`` at
  the end of the drain, or ``sent`` but never received by the sink, and that was committed more
  than the rescue delay + margin before the end (every row is, when the drain had to time out);
* duplicates: every extra copy at the sink must be matched by an ``ambiguous`` attempt of that row
  (an in-doubt event the daemon recorded), and their total must not exceed what the faults can
  cause: messages the sink read but never answered + rows in flight at each kill -9 + rows
  ``sending`` around each PostgreSQL restart;
* growth, per daemon lifetime: a kill -9 starts a fresh process, so RSS and fds are compared only
  within one process, after a warm-up (15 s or 20 % of the lifetime), median of the first third
  against median of the last third of its fault-phase samples. Fails when RSS grew by more than
  20 % and more than 10 MB, or fds by more than 10. The kills are confined to the first 40 %, so
  the last lifetime spans at least the last 60 % with every other fault still coming, and must
  be long enough to judge (40 s after warm-up); earlier lifetimes that long are judged too;
* connections: at no sample more than 3 sockets/backends to PostgreSQL (claim session + LISTEN +
  the start-up schema check) or more than the SMTP pool size sockets to the sink;
* the daemon never exits on its own, and exits 0 on the final SIGTERM.
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from bench.soak_plan import (
    MIN_JUDGED_SECONDS,
    POOL_SIZE,
    RESCUE_AFTER_SECONDS,
    WARMUP_SECONDS,
)

PG_CONNECTION_LIMIT = 3  # claim session + LISTEN + the start-up schema check
LIMITS = {"rss_growth_ratio": 0.20, "rss_growth_mb": 10.0, "fd_growth": 10, "warmup_seconds": WARMUP_SECONDS,
          "warmup_share": 0.20, "min_judged_seconds": MIN_JUDGED_SECONDS, "pg_connections": PG_CONNECTION_LIMIT,
          "smtp_connections": POOL_SIZE, "loss_margin_seconds": RESCUE_AFTER_SECONDS + 30.0}


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def judge_growth(samples: list[dict[str, Any]], fault_end: float, limits: dict[str, Any]) -> dict[str, Any]:
    """Growth of RSS and fds within each daemon lifetime (samples grouped by ``pid``)."""
    lifetimes: dict[int, list[dict[str, Any]]] = {}
    for s in samples:
        if s.get("pid") and s.get("rss_kib") is not None and s["t"] <= fault_end:
            lifetimes.setdefault(s["pid"], []).append(s)
    judged, failures = [], []
    for i, (pid, series) in enumerate(lifetimes.items()):
        last = i == len(lifetimes) - 1
        start, end = series[0]["t"], series[-1]["t"]
        warm = max(limits["warmup_seconds"], limits["warmup_share"] * (end - start))
        kept = [s for s in series if s["t"] >= start + warm]
        entry: dict[str, Any] = {"pid": pid, "from_t": round(start, 1), "to_t": round(end, 1),
                                 "peak_rss_mb": round(max(s["rss_kib"] for s in series) / 1024, 1)}
        if len(kept) < 6 or kept[-1]["t"] - kept[0]["t"] < limits["min_judged_seconds"]:
            entry["judged"] = False
            if last:
                failures.append(f"the last daemon lifetime (pid {pid}, {end - start:.0f} s) is too short "
                                "to judge growth")
            judged.append(entry)
            continue
        third = len(kept) // 3
        first, final = kept[:third], kept[-third:]
        rss0, rss1 = _median([s["rss_kib"] / 1024 for s in first]), _median([s["rss_kib"] / 1024 for s in final])
        fd0, fd1 = _median([s["fds"] for s in first]), _median([s["fds"] for s in final])
        entry.update(judged=True, rss_mb_first_third=round(rss0, 1), rss_mb_last_third=round(rss1, 1),
                     fds_first_third=fd0, fds_last_third=fd1)
        if rss1 - rss0 > limits["rss_growth_mb"] and rss1 > rss0 * (1 + limits["rss_growth_ratio"]):
            failures.append(f"RSS of pid {pid} grew {rss0:.1f} -> {rss1:.1f} MB")
        if fd1 - fd0 > limits["fd_growth"]:
            failures.append(f"open fds of pid {pid} grew {fd0:g} -> {fd1:g}")
        judged.append(entry)
    return {"lifetimes": judged, "failures": failures}


def judge_connections(samples: list[dict[str, Any]], limits: dict[str, Any]) -> dict[str, Any]:
    def peak(name: str) -> int:
        return max((s[name] for s in samples if s.get(name) is not None), default=0)

    out = {"max_pg_sockets": peak("pg_sockets"), "max_pg_backends": peak("pg_backends"),
           "max_smtp_sockets": peak("smtp_sockets"), "limit_pg": limits["pg_connections"],
           "limit_smtp": limits["smtp_connections"]}
    failures = []
    if max(out["max_pg_sockets"], out["max_pg_backends"]) > limits["pg_connections"]:
        failures.append(f"PostgreSQL connections peaked at {max(out['max_pg_sockets'], out['max_pg_backends'])} "
                        f"(limit {limits['pg_connections']})")
    if out["max_smtp_sockets"] > limits["smtp_connections"]:
        failures.append(f"SMTP connections peaked at {out['max_smtp_sockets']} (limit {limits['smtp_connections']})")
    out["failures"] = failures
    return out


def judge_delivery(committed: dict[str, float], status: dict[str, str], copies: dict[str, int],
                   ambiguous: dict[str, int], duplicate_bound: int, end: float,
                   limits: dict[str, Any]) -> dict[str, Any]:
    """``committed``: key -> seconds at COMMIT; ``status``: key -> final status; ``copies``: key ->
    messages the sink read; ``ambiguous``: key -> ambiguous attempts recorded; ``end``: seconds at
    the end of the drain."""
    lost: dict[str, str] = {}
    late = 0
    for key in set(committed) | set(status):
        why = None
        if key not in status:
            why = "missing"
        elif status[key] != "sent":
            why = status[key]
        elif copies.get(key, 0) == 0:
            why = "sent_not_delivered"
        if why is None:
            continue
        if committed.get(key, 0.0) > end - limits["loss_margin_seconds"]:
            late += 1
        else:
            lost[key] = why
    twice = {key: n for key, n in copies.items() if n > 1}
    extra = sum(n - 1 for n in twice.values())
    unexplained = sorted(key for key, n in twice.items() if ambiguous.get(key, 0) < n - 1)
    failures = []
    if lost:
        failures.append(f"{len(lost)} rows lost: {dict(Counter(lost.values()))}")
    if unexplained:
        failures.append(f"{len(unexplained)} keys received more often than in-doubt events explain: {unexplained[:10]}")
    if extra > duplicate_bound:
        failures.append(f"{extra} extra copies, more than the faults can cause ({duplicate_bound})")
    return {"committed": len(committed), "lost": len(lost), "lost_by_reason": dict(Counter(lost.values())),
            "lost_keys": sorted(lost)[:20], "not_judged_late": late, "duplicate_keys": len(twice),
            "extra_copies": extra, "duplicate_bound": duplicate_bound, "unexplained_duplicates": unexplained[:20],
            "failures": failures}


def judge(samples: list[dict[str, Any]], fault_end: float, delivery: dict[str, Any],
          problems: list[str], limits: dict[str, Any] = LIMITS) -> dict[str, Any]:
    """The verdict: ``delivery`` holds judge_delivery's arguments (without ``limits``);
    ``problems``: what went wrong on the way (a daemon exiting by itself, a fault not injected)."""
    growth = judge_growth(samples, fault_end, limits)
    connections = judge_connections(samples, limits)
    delivered = judge_delivery(**delivery, limits=limits)
    failures = [*problems, *delivered["failures"], *growth["failures"], *connections["failures"]]
    return {"ok": not failures, "failures": failures, "loss": delivered["lost"], "delivery": delivered,
            "growth": growth, "connections": connections}
