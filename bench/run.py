"""outbox-mailer benchmark: one command, one throwaway PostgreSQL, every figure side by side.

    .venv/bin/python bench/run.py            # full run (~8-11 minutes on 2 cores)
    .venv/bin/python bench/run.py --quick    # smoke run (~2 minutes)

What it measures (each figure the median of --reps repetitions unless noted),
on a throwaway PostgreSQL cluster with fsync and synchronous_commit ON:

1. core: the real Daemon draining pre-inserted rows through a no-op transport
   (claim + compose + no-op send + fenced record + unlock), against PgQueuer
   no-op jobs on the same cluster at its best batch size (a few are tried);
2. SMTP to Postfix's smtp-sink: one `outbox-mailer run` process, two processes
   sharing the table, the raw ceiling (pre-rendered bytes with aiosmtplib, no
   database) and the hand-written worker (PgQueuer + EmailMessage + aiosmtplib);
3. pickup latency from COMMIT (PostgreSQL's commit timestamp) to MAIL FROM at
   the SMTP server, one row per transaction at 100/s;
4. growth: the core figure with 1,000,000 sent rows in the table, and the
   daemon's memory while it drains a 100,000-row backlog;
5. WAL bytes and CPU (PostgreSQL's, the daemon's, PgQueuer's worker's) per email;
6. realistic (realistic.py): PostgreSQL CPU and WAL per email with the real
   daemon sending 1.8 KB receipts to a relay that takes 20 ms (50 ms) per message;
7. api (api_bench.py): emails/s through a Resend-like loopback API limited to
   2 requests/s, singly and batched;
8. drain (drain.py): PostgreSQL CPU and WAL per email, the app's INSERT (one row
   per transaction) included, of one default daemon draining 5,000 receipts to
   smtp-sink, and its statements per email by kind; against django-post_office
   queuing and sending the same receipts at its defaults (post_office_drain.py),
   in alternating rounds.

Workers run as separate OS processes (bench/*_worker.py, raw_smtp.py,
latency_sink.py, relay_sink.py, api_sink.py); the daemon under test in 2-3 and
6-8 is the real CLI (`python -m outbox_mailer run`). Prints machine facts and a
markdown table (report.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common
from api_bench import measure_api
from bench_db import Db
from bootstrap import ensure_python_deps, ensure_smtp_sink, reexec_in_project_venv
from common import BENCH_DIR, ROOT
from core_bench import core_rep, measure_core, measure_growth, measure_memory
from drain import measure_drain
from processes import PY, Daemons, SmtpSink, log
from realistic import measure_realistic
from report import report
from run_config import Config, Results
from smtp_bench import measure_latency, measure_smtp, sized, smtp_daemon_rep

PARTS = ("core", "realistic", "drain", "smtp", "api", "latency", "memory", "growth")


# ---------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small smoke run, about two minutes")
    ap.add_argument("--reps", type=int, default=0, help="repetitions per figure (default 3, quick 1)")
    ap.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                    help="the daemon's log level (default INFO, what `outbox-mailer run` uses)")
    ap.add_argument("--concurrency", type=int, default=500, help="core run: OUTBOX_MAILER_CONCURRENCY")
    ap.add_argument("--batch", type=int, default=100, help="core run: OUTBOX_MAILER_BATCH_SIZE")
    ap.add_argument("--core-rows", type=int, default=0, help="core run: rows per measurement (default 30,000, quick 5,000)")
    ap.add_argument("--pool", type=int, default=8, help="SMTP connections of the single daemon process")
    ap.add_argument("--pool-two", type=int, default=8, help="SMTP connections of each of the two daemon processes")
    ap.add_argument("--seconds", type=float, default=0.0,
                    help="target length of one SMTP measurement; its email count is sized from a warm-up "
                         "(default 6, quick 1.5)")
    ap.add_argument("--api-seconds", type=float, default=0.0,
                    help="length of each API window, singly and batched (default 20, quick 6)")
    ap.add_argument("--api-concurrency", type=int, default=0,
                    help="API run: OUTBOX_MAILER_CONCURRENCY, requests in flight (default 0: the daemon's "
                         "default, as a user who sets nothing)")
    ap.add_argument("--only", default="", help="comma list of: " + ",".join(PARTS))
    ap.add_argument("--statements", action="store_true",
                    help="realistic: count each window's statements by kind (pg_stat_statements on meanwhile)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory (daemon logs, results.json)")
    ap.add_argument("--profile", metavar="DIR", help="after the run, profile the core and the SMTP daemon with "
                                                      "py-spy into DIR and print the hotspots")
    return ap.parse_args(argv)


async def amain(args: argparse.Namespace) -> int:
    cfg = Config.from_args(args)
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    if only - set(PARTS):
        sys.exit(f"--only: unknown part(s) {', '.join(sorted(only - set(PARTS)))} (known: {', '.join(PARTS)})")

    def want(name: str) -> bool:
        return not only or name in only

    began = time.monotonic()
    ensure_python_deps()
    sink_binary = ensure_smtp_sink()
    from outbox_mailer.devtools.pgcluster import TemporaryPostgres

    load = " ".join(Path("/proc/loadavg").read_text().split()[:3]) if os.path.exists("/proc/loadavg") else "?"
    res = Results()
    workdir = Path(tempfile.mkdtemp(prefix="outbox-bench-"))
    os.chmod(workdir, 0o755)
    pg = TemporaryPostgres(fast=False, extra_settings={
        "synchronous_commit": "on", "track_commit_timestamp": "on", "max_wal_size": "4GB",
        # loaded but idle (track=none, set below) unless --profile turns it on for the profiled runs
        "shared_preload_libraries": "pg_stat_statements",
    })
    pg.start()
    try:
        with SmtpSink(sink_binary, lifetime_seconds=1800) as sink:
            db = Db(pg.url)
            await db.open()
            await db.migrate()
            pg_version = await db.conn.fetchval("SHOW server_version")
            info = common.machine_info(pg_version)
            info["load"] = load
            print("\n".join(f"{k:>10}: {v}" for k, v in info.items()), flush=True)
            log(f"PostgreSQL at {pg.url}; smtp-sink on 127.0.0.1:{sink.port}; scratch {workdir}")
            if want("core"):
                await measure_core(db, cfg, res, workdir)
            if want("realistic"):
                await measure_realistic(db, cfg, res, workdir)
            if want("drain"):
                await measure_drain(db, cfg, res, sink.port, workdir)
            if want("smtp"):
                await measure_smtp(db, cfg, res, sink, workdir)
            if want("api"):
                await measure_api(db, cfg, res, workdir, sink.port)
            if want("latency"):
                await measure_latency(db, cfg, res, workdir)
            if want("memory"):
                await measure_memory(db, cfg, res, workdir)
            if want("growth"):
                await measure_growth(db, cfg, res, workdir)
            elapsed = time.monotonic() - began
            command = "python bench/run.py" + (" --quick" if cfg.quick else "") + \
                ("" if not args.reps else f" --reps {args.reps}")
            print("\n" + report(cfg, res, info, command, elapsed), flush=True)
            if res.notes:
                print("\nNotes:\n" + "\n".join(f"- {n}" for n in res.notes))
            if cfg.profile_dir:
                await profile(db, cfg, res, sink, workdir, Path(cfg.profile_dir))
            if args.keep:
                (workdir / "results.json").write_text(json.dumps(res.figures, indent=2, default=str))
                print(f"\nraw figures and daemon logs kept in {workdir}")
            else:
                shutil.rmtree(workdir, ignore_errors=True)
    finally:
        pg.stop()
    return 0


STATEMENTS = """
SELECT calls, rows, total_exec_time AS total_ms, mean_exec_time AS mean_ms,
       left(regexp_replace(query, '\\s+', ' ', 'g'), 90) AS query
FROM pg_stat_statements
WHERE query NOT LIKE '%status IN (''pending'', ''sending'')%' AND query NOT LIKE '%pg_stat_statements%'
ORDER BY total_exec_time DESC LIMIT 8
"""


async def statements(db: Db, title: str, emails: int) -> None:
    print(f"\n===== PostgreSQL statements: {title} ({emails:,} emails; pg_stat_statements) =====")
    print(f"{'calls':>8} {'rows/call':>9} {'mean ms':>8} {'total ms':>9} {'per email':>10}  query")
    for r in await db.conn.fetch(STATEMENTS):
        per_call = r["rows"] / r["calls"] if r["calls"] else 0
        print(f"{r['calls']:>8} {per_call:>9.1f} {r['mean_ms']:>8.3f} {r['total_ms']:>9.0f} "
              f"{1000 * r['total_ms'] / emails:>8.1f}us  {r['query']}")


async def profile(db: Db, cfg: Config, res: Results, sink: SmtpSink, workdir: Path, out: Path) -> None:
    """py-spy (100 Hz) on one core run and one single-process SMTP run; pg_stat_statements for both."""
    out.mkdir(parents=True, exist_ok=True)
    log(f"profiling (py-spy, 100 Hz) into {out}")
    await db.conn.execute("ALTER SYSTEM SET pg_stat_statements.track = 'top'")
    await db.conn.execute("SELECT pg_reload_conf()")
    try:
        core_prof = str(out / "core.raw")

        async def reset() -> None:
            await db.conn.execute("SELECT pg_stat_statements_reset()")

        r = await core_rep(db, cfg, "prof-", cfg.core_rows, truncate=True, profile=core_prof, workdir=workdir,
                           before_run=reset)
        log(f"  core under py-spy: {r['rate']:,.0f}/s")
        await statements(db, "core run", cfg.core_rows)
        smtp_prof = str(out / "smtp.raw")
        await db.truncate()
        with Daemons(db, cfg, sink.port, 1, cfg.pool_one, "prof", workdir, profile=smtp_prof):
            await smtp_daemon_rep(db, "prof-warm-", 500)
            rows = sized(float(res.figures.get("smtp1_rate") or 1_000), cfg, 2_000, 40_000)
            await reset()
            rate = await smtp_daemon_rep(db, "prof-smtp-", rows)
            log(f"  SMTP daemon under py-spy: {rate:,.0f}/s")
            await statements(db, "SMTP run, 1 daemon process", rows)
    finally:
        await db.conn.execute("ALTER SYSTEM SET pg_stat_statements.track = 'none'")
        await db.conn.execute("SELECT pg_reload_conf()")
    for name, path in (("core (no-op transport)", core_prof), ("SMTP daemon, 1 process", smtp_prof)):
        deadline = time.monotonic() + 20
        while not os.path.exists(path) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        print(f"\n===== hotspots: {name} (py-spy samples; {path}) =====", flush=True)
        subprocess.run([PY, str(BENCH_DIR / "hotspots.py"), path, "--top", "20"], check=False)


def main() -> int:
    reexec_in_project_venv()
    os.chdir(ROOT)
    return asyncio.run(amain(parse_args()))


if __name__ == "__main__":
    sys.exit(main())
