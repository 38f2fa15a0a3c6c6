"""The core figure: the real Daemon through a no-op transport against PgQueuer's no-op jobs; memory; growth.

core_worker.py and pgq_worker.py run as separate processes; the rows and jobs are put in before
each run, and PostgreSQL's CPU (the postmaster's process tree) and WAL are metered around it, the
worker's own CPU from inside it (user + system over the drain).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import common
from bench_db import Db
from common import median
from processes import log, run_worker
from run_config import Config, Results


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
