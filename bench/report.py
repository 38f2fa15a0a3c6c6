"""The markdown table a run prints: every figure next to its reference and its target (issues 13 and 33).

Targets: core PostgreSQL CPU ≤ 60 µs and WAL ≤ 1.6 KB per email, daemon CPU ≤ 80 µs per email, core
≥ 1.0x PgQueuer's best no-op batch, SMTP with 2 processes ≥ 85% of the raw two-process ceiling and the
SMTP daemons' CPU per email ≤ 1.2x the raw sender's per message, realistic PostgreSQL CPU ≤ 100 µs
(pool 8) and ≤ 150 µs (defaults) and WAL ≤ 1.6 KB per email (realistic.py), ≥ 150 emails/s through a
2 requests/s API at the default settings (api_bench.py), the drain's PostgreSQL CPU per email < 1.0x
django-post_office's at both sides' defaults (post_office_drain.py); still held: pickup p50 ≤ 5 ms and p99 ≤ 30 ms,
growth ≥ 90%, bounded memory.
"""

from __future__ import annotations

import api_bench
import drain
import post_office_drain
import realistic

KB = 1024


def fmt_rate(x: object) -> str:
    return "n/a" if x is None else f"{float(x):,.0f}/s"


def mark(ok: bool | None) -> str:
    return "n/a" if ok is None else ("**met**" if ok else "**missed**")


def core_rows(cfg, g) -> list[tuple[str, ...]]:
    rows = []
    core, pgq = g("core_rate"), g("pgq_rate")
    if core is not None and pgq is not None:
        rows.append(("Core: claim + compose + no-op send + record, real daemon, 1 process",
                     fmt_rate(core), f"PgQueuer no-op jobs, batch {g('pgq_batch')}: {fmt_rate(pgq)}",
                     f"{core / pgq:.2f}x", "≥ 1.0x", mark(core / pgq >= 1.0)))
    pg, daemon = g("core_pg_cpu_us"), g("core_cpu_us")
    pgq_pg, pgq_worker = g("pgq_pg_cpu_us"), g("pgq_cpu_us")
    ref = "PgQueuer per no-op job: "
    ref += f"{pgq_pg:.0f} µs" if pgq_pg is not None else "n/a"
    if pg is not None:
        rows.append(("PostgreSQL CPU per email, core run (user + system of the postmaster's process tree)",
                     f"{pg:.0f} µs", ref, f"{pg / pgq_pg:.1f}x" if pgq_pg else "", "≤ 60 µs", mark(pg <= 60)))
    if daemon is not None:
        ref = f"PgQueuer worker process per no-op job: {pgq_worker:.0f} µs" if pgq_worker is not None else ""
        rows.append(("Daemon CPU per email, core run (user + system of the process)", f"{daemon:.0f} µs", ref,
                     f"{daemon / pgq_worker:.1f}x" if pgq_worker else "", "≤ 80 µs", mark(daemon <= 80)))
    if pg is not None and daemon is not None:
        total = pg + daemon
        theirs = (pgq_pg or 0) + (pgq_worker or 0) if pgq_pg is not None and pgq_worker is not None else None
        rows.append(("Total CPU per email, core run: daemon + PostgreSQL", f"{daemon:.0f} + {pg:.0f} = {total:.0f} µs",
                     f"per PgQueuer no-op job, worker + PostgreSQL: {pgq_worker:.0f} + {pgq_pg:.0f} = {theirs:.0f} µs"
                     if theirs is not None else "", f"{total / theirs:.1f}x" if theirs else "", "reported", ""))
    if g("core_wal") is not None:
        wal = g("core_wal")
        rows.append(("WAL per email, core run (claim + record + attempt row)", f"{wal / KB:.2f} KB",
                     f"PgQueuer per no-op job: {(g('pgq_wal') or 0) / KB:.2f} KB; the app's INSERT: "
                     f"{g('insert_wal') / KB:.2f} KB", "", "≤ 1.6 KB", mark(wal <= 1.6 * KB)))
    return rows


def smtp_rows(cfg, g) -> list[tuple[str, ...]]:
    rows = []
    one, two, raw, raw2, hand = g("smtp1_rate"), g("smtp2_rate"), g("raw_rate"), g("raw2_rate"), g("handwritten_rate")
    if one is not None:
        rows.append((f"SMTP to smtp-sink, 1 daemon process ({cfg.pool_one} connections)", fmt_rate(one), "", "",
                     "≥ 2,500/s", mark(one >= 2_500)))
    if two is not None and raw2 is not None:
        rows.append((f"SMTP to smtp-sink, 2 daemon processes ({cfg.pool_two} connections each)", fmt_rate(two),
                     f"raw ceiling, aiosmtplib, pre-rendered, 2 processes, {cfg.pool_two} connections each: "
                     f"{fmt_rate(raw2)}", f"{100 * two / raw2:.0f}%", "≥ 85%", mark(two / raw2 >= 0.85)))
    if raw is not None and two is not None:
        rows.append(("", "", f"raw, 1 process, {2 * cfg.pool_two} connections: {fmt_rate(raw)}",
                     f"{100 * two / raw:.0f}%", "(for information)", ""))
    if one is not None and hand is not None:
        rows.append(("SMTP, 1 daemon process vs the hand-written worker", fmt_rate(one),
                     f"PgQueuer + EmailMessage + aiosmtplib, 1 process, {cfg.pool_one} connections: "
                     f"{fmt_rate(hand)}", f"{one / hand:.1f}x", "≥ 4x", mark(one / hand >= 4)))
    cpu = [(label, g(key)) for key, label in (("smtp1_cpu_us", "1 process"), ("smtp2_cpu_us", "2 processes (both)"))
           if g(key) is not None]
    if cpu:
        rows.append(("Daemon CPU per email through SMTP to smtp-sink (user + system)",
                     "; ".join(f"{label} {value:.0f} µs" for label, value in cpu), "", "", "reported", ""))
    daemons_cpu, raw_cpu = g("smtp2_cpu_us"), g("raw2_cpu_us")
    if daemons_cpu is not None and raw_cpu is not None:
        rows.append(("CPU per email through SMTP, 2 daemon processes (both, user + system)", f"{daemons_cpu:.0f} µs",
                     f"raw sender, 2 processes (both), per message: {raw_cpu:.0f} µs", f"{daemons_cpu / raw_cpu:.2f}x",
                     "≤ 1.2x", mark(daemons_cpu / raw_cpu <= 1.2)))
    return rows


def other_rows(cfg, g) -> list[tuple[str, ...]]:
    rows = []
    if g("latency_p50") is not None:
        p50, p99 = g("latency_p50"), g("latency_p99")
        rows.append((f"Pickup latency, COMMIT → MAIL FROM, {cfg.latency_rate:g} emails/s, "
                     f"{g('latency_n')} emails", f"p50 {p50:.1f} ms, p99 {p99:.1f} ms", f"max {g('latency_max'):.1f} ms",
                     "", "p50 ≤ 5 ms, p99 ≤ 30 ms", mark(p50 <= 5 and p99 <= 30)))
    if g("growth_rate") is not None:
        gr, base = g("growth_rate"), g("growth_empty_rate")
        rows.append((f"Core with {cfg.final_rows:,} sent rows in the table", fmt_rate(gr),
                     f"empty table, same rounds: {fmt_rate(base)}", f"{100 * gr / base:.0f}%", "≥ 90%",
                     mark(gr / base >= 0.9)))
    if g("memory_peak_rss") is not None:
        rows.append((f"Daemon peak RSS draining a {cfg.memory_rows:,}-row backlog", f"{g('memory_peak_rss'):.0f} MB",
                     f"{cfg.core_rows:,}-row backlog: {g('core_peak_rss') or 0:.0f} MB; SMTP daemon: "
                     f"{g('smtp1_rss') or 0:.0f} MB", "", "reported, bounded", ""))
    return rows


def report(cfg, res, info: dict[str, str], command: str, elapsed: float) -> str:
    f = res.figures
    g = f.get
    rows = (core_rows(cfg, g) + realistic.report_rows(f) + drain.report_rows(f) + post_office_drain.report_rows(f)
            + smtp_rows(cfg, g)
            + api_bench.report_rows(f, cfg.api_concurrency) + other_rows(cfg, g))
    lines = []
    lines.append(f"Machine: {info['cpu']}, {info['cores']} cores, {info['memory']}, Linux {info['kernel']}; "
                 f"Python {info['python']}; PostgreSQL {info['postgresql']} (throwaway cluster, fsync on, "
                 "synchronous_commit on); " + info["libraries"] + ".")
    lines.append(f"Load average before the run: {info['load']}. Run time {elapsed / 60:.1f} min"
                 f"{' (--quick: smoke figures, not for the README)' if cfg.quick else ''}.")
    lines.append("")
    lines.append("| measurement | outbox-mailer | reference, same run | ratio | target | |")
    lines.append("|---|---|---|---|---|---|")
    for r in rows:
        lines.append("| " + " | ".join(r) + " |")
    lines.append("")
    lines.append(f"Medians of {cfg.reps} runs (interleaved rounds: each figure and its reference measured "
                 f"alternately). Reproduce: `{command}`")
    details = []
    if g("pgq_sweep"):
        details.append("PgQueuer no-op by batch size (median jobs/s): "
                       + ", ".join(f"{b}: {r:,}" for b, r in g("pgq_sweep").items()))
    for key, label in (("core_rates", "core, outbox-mailer"), ("pgq_rates", "core, PgQueuer"),
                       ("smtp1_rates", "SMTP, 1 process"), ("handwritten_rates", "hand-written worker"),
                       ("smtp2_rates", "SMTP, 2 processes"), ("raw_rates", "raw ceiling, 1 process"),
                       ("raw2_rates", "raw ceiling, 2 processes"), ("growth_empty_rates", "core, empty table (growth rounds)"),
                       ("growth_rates", f"core, {cfg.final_rows:,} sent rows")):
        if g(key):
            details.append(f"{label}: " + ", ".join(f"{x:,.0f}" for x in g(key)) + " /s")
    details += realistic.details(f) + drain.details(f)
    if details:
        lines.append("")
        lines.append("Per-round figures: " + "; ".join(details) + ".")
    return "\n".join(lines)
