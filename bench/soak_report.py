"""The soak's output: one line per sample while it runs, the summary table and verdict at the end."""

from __future__ import annotations

from typing import Any


def sample_line(s: dict[str, Any]) -> str:
    def f(name: str, width: int) -> str:
        value = s.get(name)
        return f"{'-' if value is None else value:>{width}}"

    rss = f"{s['rss_kib'] / 1024:.1f}" if s.get("rss_kib") else "-"
    pg = f"{'-' if s.get('pg_sockets') is None else s['pg_sockets']}/{s.get('pg_backends', '-')}"
    return (f"{s['t']:>6} {s['pid']:>7} {rss:>7} {f('fds', 4)} {pg:>5} {f('smtp_sockets', 4)} {f('due', 5)} "
            f"{f('sending', 7)} {f('sent', 7)} {f('failed', 6)} {f('in_doubt', 8)} {f('delivered', 9)} "
            f"{f('extra_copies', 5)} {f('faults', 6)}")


def summary(result: dict[str, Any], rows: int = 12) -> str:
    """A markdown table of about ``rows`` samples spread over the run, then the verdict."""
    samples = result["samples"]
    step = max(1, len(samples) // rows)
    picked = samples[::step] + ([samples[-1]] if (len(samples) - 1) % step else [])
    lines = [("| t (s) | pid | RSS MB | fds | PG sockets/backends | SMTP sockets | due | sending | sent | failed "
              "| in_doubt | delivered | extra copies | faults so far |"), "|" + "---|" * 14]
    for s in picked:
        rss = f"{s['rss_kib'] / 1024:.1f}" if s.get("rss_kib") else "-"
        lines.append(f"| {s['t']:.0f} | {s['pid']} | {rss} | {s.get('fds')} | {s.get('pg_sockets')}/"
                     f"{s.get('pg_backends', '-')} | {s.get('smtp_sockets')} | {s.get('due', '-')} | "
                     f"{s.get('sending', '-')} | {s.get('sent', '-')} | {s.get('failed', '-')} | "
                     f"{s.get('in_doubt', '-')} | {s['delivered']} | {s['extra_copies']} | {s['faults']} |")
    v = result["verdict"]
    d, c = v["delivery"], v["connections"]
    lines += ["", f"faults: {result['fault_counts']}; sink: {result['sink']}; attempts: {result['attempt_outcomes']}",
              (f"rows: {d['committed']} committed, final {result['final_status']}, lost {d['lost']} "
              f"{d['lost_by_reason'] or ''}; duplicates: {d['duplicate_keys']} keys, {d['extra_copies']} extra copies "
              f"(bound {d['duplicate_bound']}: {d['unanswered_at_sink']} unanswered at the sink + "
              f"{d['in_flight_at_faults']} in flight at kills/restarts), "
              f"unexplained {len(d['unexplained_duplicates'])}"),
              (f"connections: PostgreSQL max {c['max_pg_sockets']} sockets / {c['max_pg_backends']} backends "
              f"(limit {c['limit_pg']}), SMTP max {c['max_smtp_sockets']} (limit {c['limit_smtp']})")]
    for life in v["growth"]["lifetimes"]:
        if life["judged"]:
            lines.append(f"growth, pid {life['pid']} ({life['from_t']}-{life['to_t']} s): RSS "
                         f"{life['rss_mb_first_third']} -> {life['rss_mb_last_third']} MB, fds "
                         f"{life['fds_first_third']:g} -> {life['fds_last_third']:g}")
        else:
            lines.append(f"growth, pid {life['pid']} ({life['from_t']}-{life['to_t']} s): too short to judge, "
                         f"peak RSS {life['peak_rss_mb']} MB")
    lines.append("VERDICT: " + ("PASS" if v["ok"] else "FAIL: " + "; ".join(v["failures"])))
    return "\n".join(lines)
