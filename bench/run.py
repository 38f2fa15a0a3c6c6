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
   2 requests/s, singly and batched.

Workers run as separate OS processes (bench/*_worker.py, raw_smtp.py,
latency_sink.py, relay_sink.py, api_sink.py); the daemon under test in 2-3 and
6-7 is the real CLI (`python -m outbox_mailer run`). Prints machine facts and a
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
from dataclasses import dataclass, field
from pathlib import Path

import common
from api_bench import measure_api
from bench_db import Db
from bootstrap import ensure_python_deps, ensure_smtp_sink, reexec_in_project_venv
from common import BENCH_DIR, ROOT, median
from processes import PY, DaemonProcess, Daemons, SmtpSink, log, run_worker
from realistic import measure_realistic
from report import report

PARTS = ("core", "realistic", "smtp", "api", "latency", "memory", "growth")


# ---------------------------------------------------------------------------- configuration


@dataclass
class Config:
    quick: bool
    reps: int
    log_level: str
    core_rows: int
    core_concurrency: int
    core_batch: int
    memory_rows: int
    pgq_batches: list[int]
    seconds: float
    pool_one: int
    pool_two: int
    latency_seconds: float
    latency_rate: float
    final_rows: int
    api_seconds: float
    api_concurrency: int
    profile_dir: str | None

    @classmethod
    def from_args(cls, a: argparse.Namespace) -> Config:
        q = a.quick
        return cls(
            quick=q, reps=a.reps or (1 if q else 3), log_level=a.log_level,
            core_rows=a.core_rows or (5_000 if q else 30_000), core_concurrency=a.concurrency, core_batch=a.batch,
            memory_rows=10_000 if q else 100_000,
            pgq_batches=[100, 500] if q else [100, 250, 500, 1000],
            seconds=a.seconds or (1.5 if q else 6.0), pool_one=a.pool, pool_two=a.pool_two,
            latency_seconds=3.0 if q else 10.0, latency_rate=100.0,
            final_rows=50_000 if q else 1_000_000,
            api_seconds=a.api_seconds or (6.0 if q else 20.0), api_concurrency=a.api_concurrency,
            profile_dir=a.profile,
        )


@dataclass
class Results:
    figures: dict[str, object] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def put(self, key: str, value: object) -> None:
        self.figures[key] = value


# ---------------------------------------------------------------------------- measurements


async def core_rep(db: Db, cfg: Config, prefix: str, rows: int, *, truncate: bool,
                   profile: str | None = None, workdir: Path, before_run=None) -> dict[str, float]:
    if truncate:
        await db.truncate()
    lsn0 = await db.lsn()
    await db.insert_rows(prefix, rows)
    insert_wal = await db.wal_since(lsn0)
    await db.vacuum()
    if before_run is not None:
        await before_run()
    lsn1 = await db.lsn()
    pg_cpu = await db.server_cpu_seconds()
    r = await run_worker(["core_worker.py", db.url, str(rows), str(cfg.core_concurrency), str(cfg.core_batch),
                          cfg.log_level], profile=profile, stderr_path=str(workdir / "core.log"))
    pg_cpu = await db.server_cpu_seconds() - pg_cpu
    wal = await db.wal_since(lsn1)
    sent = await db.count(prefix, "sent")
    if sent != rows:
        raise RuntimeError(f"core run: {sent} of {rows} rows sent")
    return {"rate": rows / (r["end"] - r["start"]), "wal": wal / rows, "insert_wal": insert_wal / rows,
            "peak_rss": r["peak_rss_mb"], "cpu_us": 1e6 * r["cpu_seconds"] / rows, "pg_cpu_us": 1e6 * pg_cpu / rows}


async def pgq_rep(db: Db, mode: str, jobs: int, batch: int, extra: list[str], workdir: Path) -> dict[str, float]:
    from pgqueuer import Queries

    await db.conn.execute("TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics")
    q = Queries.from_asyncpg_connection(db.conn)
    if mode == "noop":
        payloads = [None] * jobs
    else:
        payloads = [json.dumps(common.email_payload(n)).encode() for n in range(jobs)]
    for first in range(0, jobs, 50_000):
        part = payloads[first:first + 50_000]
        await q.enqueue([mode] * len(part), part, [0] * len(part))
    await db.conn.execute("VACUUM (ANALYZE) pgqueuer")
    lsn = await db.lsn()
    pg_cpu = await db.server_cpu_seconds()
    r = await run_worker(["pgq_worker.py", mode, db.url, str(jobs), str(batch), *extra],
                         stderr_path=str(workdir / f"pgq-{mode}.log"))
    pg_cpu = await db.server_cpu_seconds() - pg_cpu
    wal = await db.wal_since(lsn)
    left = await db.conn.fetchval("SELECT count(*) FROM pgqueuer")
    if left or r["done"] != jobs:
        raise RuntimeError(f"PgQueuer {mode}: {r['done']} of {jobs} done, {left} left in the queue")
    return {"rate": jobs / (r["end"] - r["start"]), "wal": wal / jobs, "pg_cpu_us": 1e6 * pg_cpu / jobs,
            "cpu_us": 1e6 * r["cpu_seconds"] / jobs}


async def measure_core(db: Db, cfg: Config, res: Results, workdir: Path) -> None:
    """outbox-mailer and PgQueuer (every batch size) in interleaved rounds, so drift hits all alike."""
    log(f"core: outbox-mailer ({cfg.core_rows:,} rows, concurrency {cfg.core_concurrency}, batch {cfg.core_batch}, "
        f"log level {cfg.log_level}) and PgQueuer no-op ({cfg.core_rows:,} jobs, batch sizes {cfg.pgq_batches}), "
        f"{cfg.reps} interleaved rounds after a warm-up")
    await core_rep(db, cfg, "warm-", min(cfg.core_rows, 5_000), truncate=True, workdir=workdir)
    await pgq_rep(db, "noop", min(cfg.core_rows, 5_000), 100, [], workdir)
    ours: list[dict[str, float]] = []
    theirs: dict[int, list[dict[str, float]]] = {b: [] for b in cfg.pgq_batches}
    for i in range(cfg.reps):
        ours.append(await core_rep(db, cfg, f"core{i}-", cfg.core_rows, truncate=True, workdir=workdir))
        line = (f"  round {i + 1}: outbox-mailer {ours[-1]['rate']:,.0f}/s ({ours[-1]['cpu_us']:.0f} µs CPU/email, "
                f"PostgreSQL {ours[-1]['pg_cpu_us']:.0f} µs); PgQueuer")
        for b in cfg.pgq_batches:
            theirs[b].append(await pgq_rep(db, "noop", cfg.core_rows, b, [], workdir))
            t = theirs[b][-1]
            line += f" b{b} {t['rate']:,.0f}/s ({t['cpu_us']:.0f} + PostgreSQL {t['pg_cpu_us']:.0f} µs)"
        log(line)
    best = max(theirs, key=lambda b: median([r["rate"] for r in theirs[b]]))
    res.put("core_rate", median([r["rate"] for r in ours]))
    res.put("core_rates", [r["rate"] for r in ours])
    res.put("core_wal", median([r["wal"] for r in ours]))
    res.put("core_cpu_us", median([r["cpu_us"] for r in ours]))
    res.put("core_pg_cpu_us", median([r["pg_cpu_us"] for r in ours]))
    res.put("insert_wal", median([r["insert_wal"] for r in ours]))
    res.put("core_peak_rss", max(r["peak_rss"] for r in ours))
    res.put("pgq_batch", best)
    res.put("pgq_rate", median([r["rate"] for r in theirs[best]]))
    res.put("pgq_rates", [r["rate"] for r in theirs[best]])
    res.put("pgq_wal", median([r["wal"] for r in theirs[best]]))
    res.put("pgq_pg_cpu_us", median([r["pg_cpu_us"] for r in theirs[best]]))
    res.put("pgq_cpu_us", median([r["cpu_us"] for r in theirs[best]]))
    res.put("pgq_sweep", {b: round(median([r["rate"] for r in v])) for b, v in theirs.items()})


async def measure_memory(db: Db, cfg: Config, res: Results, workdir: Path) -> None:
    log(f"memory: the daemon draining a {cfg.memory_rows:,}-row backlog (no-op transport)")
    r = await core_rep(db, cfg, "mem-", cfg.memory_rows, truncate=True, workdir=workdir)
    res.put("memory_peak_rss", r["peak_rss"])
    res.put("memory_rate", r["rate"])


def sized(rate: float, cfg: Config, low: int, high: int) -> int:
    """How many emails make a measurement of about cfg.seconds at this rate."""
    return int(max(low, min(high, round(rate * cfg.seconds, -2))))


async def smtp_daemon_rep(db: Db, prefix: str, rows: int, daemons: Daemons | None = None) -> float:
    await db.conn.execute("BEGIN")
    await db.insert_rows(prefix, rows)
    cpu = daemons.cpu_seconds() if daemons else 0.0
    start = time.time()
    await db.conn.execute("COMMIT")  # the statement trigger's NOTIFY goes out with it
    await db.wait_drained(300)
    sent = await db.count(prefix, "sent")
    if sent != rows:
        raise RuntimeError(f"SMTP run {prefix}: {sent} of {rows} sent (see the daemon logs)")
    if daemons:
        daemons.cpu_us.append(1e6 * (daemons.cpu_seconds() - cpu) / rows)
    return rows / (await db.last_update(prefix) - start)


async def raw_rep(sink: SmtpSink, messages: int, connections: int, processes: int) -> float:
    per = messages // processes
    go_at = time.time() + 1.0  # every process connected and ready by then
    outs = await asyncio.gather(*(run_worker(["raw_smtp.py", str(sink.port), str(per),
                                              str(connections // processes), str(go_at)])
                                  for _ in range(processes)))
    return per * processes / (max(o["end"] for o in outs) - min(o["start"] for o in outs))


async def measure_smtp(db: Db, cfg: Config, res: Results, sink: SmtpSink, workdir: Path) -> None:
    # -- one daemon process, with the hand-written worker in the same rounds
    log(f"SMTP, 1 daemon process ({cfg.pool_one} connections) and the hand-written worker (PgQueuer + EmailMessage "
        f"+ aiosmtplib, {cfg.pool_one} connections), {cfg.reps} interleaved rounds")
    await db.truncate()
    hw_batch = min(int(res.figures.get("pgq_batch", 100)), 100)  # more jobs in flight than connections only queue
    hw_extra = [str(sink.port), str(cfg.pool_one)]
    with Daemons(db, cfg, sink.port, 1, cfg.pool_one, "smtp1", workdir) as daemons:
        warm = await smtp_daemon_rep(db, "smtp1-warm-", 1_000)
        rows = sized(warm, cfg, 2_000, 40_000)
        hw_warm = (await pgq_rep(db, "email", 300, hw_batch, hw_extra, workdir))["rate"]
        hw_rows = sized(hw_warm, cfg, 500, 10_000)
        ones, hands = [], []
        for i in range(cfg.reps):
            ones.append(await smtp_daemon_rep(db, f"smtp1-{i}-", rows, daemons))
            hands.append((await pgq_rep(db, "email", hw_rows, hw_batch, hw_extra, workdir))["rate"])
            log(f"  round {i + 1}: daemon {ones[-1]:,.0f}/s ({rows:,} emails, {daemons.cpu_us[-1]:.0f} µs CPU/email); "
                f"hand-written {hands[-1]:,.0f}/s "
                f"({hw_rows:,} emails)")
    res.put("smtp1_rate", median(ones))
    res.put("smtp1_rates", ones)
    res.put("smtp1_rows", rows)
    res.put("smtp1_rss", max(peak for _, peak in daemons.rss))
    res.put("smtp1_cpu_us", median(daemons.cpu_us))
    res.put("handwritten_rate", median(hands))
    res.put("handwritten_rates", hands)
    res.put("handwritten_batch", hw_batch)
    # -- two daemon processes, with the raw ceilings in the same rounds
    conns = 2 * cfg.pool_two
    log(f"SMTP, 2 daemon processes ({cfg.pool_two} connections each) and the raw ceiling (aiosmtplib, pre-rendered, "
        f"no database, {conns} connections: 1 process, and 2 processes), {cfg.reps} interleaved rounds")
    await db.truncate()
    with Daemons(db, cfg, sink.port, 2, cfg.pool_two, "smtp2", workdir) as daemons:
        warm = await smtp_daemon_rep(db, "smtp2-warm-", 2_000)
        rows = sized(warm, cfg, 2_000, 40_000)
        raw_warm = await raw_rep(sink, 2_000, conns, 1)
        raw_rows = sized(raw_warm, cfg, 2_000, 40_000)
        twos, raws, raws2 = [], [], []
        for i in range(cfg.reps):
            twos.append(await smtp_daemon_rep(db, f"smtp2-{i}-", rows, daemons))
            raws.append(await raw_rep(sink, raw_rows, conns, 1))
            raws2.append(await raw_rep(sink, raw_rows, conns, 2))
            log(f"  round {i + 1}: 2 daemons {twos[-1]:,.0f}/s ({rows:,} emails, {daemons.cpu_us[-1]:.0f} µs CPU/email); "
                f"raw 1 process {raws[-1]:,.0f}/s, "
                f"2 processes {raws2[-1]:,.0f}/s ({raw_rows:,} emails)")
    failed = await db.conn.fetchval("SELECT count(*) FROM email_deliveries WHERE status <> 'sent'")
    if failed:
        res.notes.append(f"SMTP: {failed} rows not sent")
    res.put("smtp2_rate", median(twos))
    res.put("smtp2_rates", twos)
    res.put("smtp2_rss", max(peak for _, peak in daemons.rss))
    res.put("smtp2_cpu_us", median(daemons.cpu_us))
    res.put("raw_rate", median(raws))
    res.put("raw_rates", raws)
    res.put("raw2_rate", median(raws2))
    res.put("raw2_rates", raws2)


LATENCY_INSERT = """
INSERT INTO email_deliveries (dedupe_key, from_address, to_addresses, subject, text_body, html_body, metadata)
VALUES ($1, $2, ARRAY[$3], $4, $5, $6, '{"kind": "latency"}')
RETURNING xmin::text
"""


async def measure_latency(db: Db, cfg: Config, res: Results, workdir: Path) -> None:
    count = int(cfg.latency_seconds * cfg.latency_rate)
    log(f"pickup latency: {count} rows, one per transaction, at {cfg.latency_rate:g}/s; "
        "COMMIT timestamp -> MAIL FROM at the server")
    await db.truncate()
    port = common.free_port()
    out = workdir / "latency-sink.txt"
    sink = subprocess.Popen([PY, str(BENCH_DIR / "latency_sink.py"), str(port), str(out),
                             str(cfg.latency_seconds + 120)], stdin=subprocess.DEVNULL, cwd=str(BENCH_DIR))
    daemon = None
    try:
        common.wait_port(port)
        daemon = DaemonProcess(db.url, port, cfg.pool_one, "latency", cfg.log_level, workdir)
        daemon.wait_started()

        async def insert(i: int, tag: str) -> str:
            return await db.conn.fetchval(
                LATENCY_INSERT, f"{tag}{i}", f"Shop <{tag}{i}@example.com>",
                f"Customer {i} <customer{i}@example.com>", f"Your order #{i} has shipped",
                common.TEXT_BODY.replace("{n}", str(i)), common.HTML_BODY.replace("{n}", str(i)))

        for i in range(20):  # warm-up: connections open, statements prepared
            await insert(i, "lwarm")
            await asyncio.sleep(0.02)
        await db.wait_drained(30)
        xids: dict[str, str] = {}
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        for i in range(count):
            delay = t0 + i / cfg.latency_rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            xids[f"lat{i}"] = await insert(i, "lat")
        await db.wait_drained(60)
        await asyncio.sleep(0.2)
    finally:
        if daemon is not None:
            daemon.stop()
        sink.terminate()
        sink.wait(timeout=10)
    committed = {
        r["x"]: r["t"] for r in await db.conn.fetch(
            "SELECT x, extract(epoch FROM pg_xact_commit_timestamp(x::xid))::float8 AS t FROM unnest($1::text[]) x",
            list(xids.values()))
    }
    mail_from: dict[str, float] = {}
    for line in out.read_text().splitlines():
        ts, sender = line.split(" ", 1)
        key = sender.split("@", 1)[0]
        mail_from.setdefault(key, float(ts))  # the first MAIL FROM for that row
    latencies = sorted((mail_from[k] - committed[x]) * 1000 for k, x in xids.items() if k in mail_from)
    if len(latencies) != count:
        res.notes.append(f"latency: {count - len(latencies)} of {count} rows never reached the server")
    res.put("latency_p50", common.percentile(latencies, 50))
    res.put("latency_p99", common.percentile(latencies, 99))
    res.put("latency_max", latencies[-1] if latencies else float("nan"))
    res.put("latency_n", len(latencies))
    log(f"  p50 {res.figures['latency_p50']:.2f} ms, p99 {res.figures['latency_p99']:.2f} ms, "
        f"max {res.figures['latency_max']:.2f} ms")


async def measure_growth(db: Db, cfg: Config, res: Results, workdir: Path) -> None:
    """The core run against a second database of the same cluster holding the sent rows, alternating
    with the empty table, so both figures come from the same minutes."""
    log(f"growth: {cfg.final_rows:,} sent rows in a second database, then {cfg.reps} rounds of {cfg.core_rows:,} "
        "rows through the no-op daemon: empty table, then the full one")
    await db.conn.execute("DROP DATABASE IF EXISTS outbox_grown")
    await db.conn.execute("CREATE DATABASE outbox_grown")
    grown = Db(db.url.rsplit("/", 1)[0] + "/outbox_grown")
    await grown.open()
    try:
        await grown.migrate(pgqueuer=False)
        t = time.monotonic()
        await grown.insert_rows("final-", cfg.final_rows, status="sent")
        await grown.vacuum()
        await grown.conn.execute("CHECKPOINT")  # the load's dirty pages out of the way of the measurement
        log(f"  {cfg.final_rows:,} sent rows in place after {time.monotonic() - t:.0f} s")
        empty, full = [], []
        for i in range(cfg.reps):
            empty.append((await core_rep(db, cfg, f"empty{i}-", cfg.core_rows, truncate=True,
                                         workdir=workdir))["rate"])
            full.append((await core_rep(grown, cfg, f"grow{i}-", cfg.core_rows, truncate=False,
                                        workdir=workdir))["rate"])
            log(f"  round {i + 1}: empty table {empty[-1]:,.0f}/s, with {cfg.final_rows:,} sent rows "
                f"{full[-1]:,.0f}/s")
    finally:
        await grown.conn.close()
    await db.conn.execute("DROP DATABASE IF EXISTS outbox_grown")
    res.put("growth_rate", median(full))
    res.put("growth_rates", full)
    res.put("growth_empty_rate", median(empty))
    res.put("growth_empty_rates", empty)


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
    ap.add_argument("--api-concurrency", type=int, default=200,
                    help="API run: OUTBOX_MAILER_CONCURRENCY, rows held claimed (default 200: two 100-email "
                         "batches' worth; 0: the daemon's default)")
    ap.add_argument("--only", default="", help="comma list of: " + ",".join(PARTS))
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory (daemon logs, results.json)")
    ap.add_argument("--profile", metavar="DIR", help="after the run, profile the core and the SMTP daemon with "
                                                      "py-spy into DIR and print the hotspots")
    return ap.parse_args(argv)


async def amain(args: argparse.Namespace) -> int:
    cfg = Config.from_args(args)
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    if only - set(PARTS):
        sys.exit(f"--only: unknown part(s) {', '.join(sorted(only - set(PARTS)))} (known: {', '.join(PARTS)})")
    want = (lambda name: not only or name in only)
    began = time.monotonic()
    ensure_python_deps()
    sink_binary = ensure_smtp_sink()
    from outbox_mailer.pgcluster import TemporaryPostgres

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
