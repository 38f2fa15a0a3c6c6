"""SMTP figures: the CLI daemon to smtp-sink (1 and 2 processes), the raw ceiling, the hand-written
worker, and the pickup latency (COMMIT -> MAIL FROM at latency_sink.py).
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

import common
from common import BENCH_DIR, median
from core_bench import pgq_rep
from processes import PY, DaemonProcess, Daemons, SmtpSink, log, run_worker
from run_config import Config, Results

if TYPE_CHECKING:  # annotations only
    from bench_db import Db


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


async def raw_rep(sink: SmtpSink, messages: int, connections: int, processes: int) -> tuple[float, float]:
    """The raw sender's rate and its CPU per message in µs (its processes' CPU summed, as the daemons')."""
    per = messages // processes
    go_at = time.time() + 1.0  # every process connected and ready by then
    outs = await asyncio.gather(*(run_worker(["raw_smtp.py", str(sink.port), str(per),
                                              str(connections // processes), str(go_at)])
                                  for _ in range(processes)))
    rate = per * processes / (max(o["end"] for o in outs) - min(o["start"] for o in outs))
    return rate, 1e6 * sum(float(o["cpu_seconds"]) for o in outs) / (per * processes)


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
        raw_warm, _ = await raw_rep(sink, 2_000, conns, 1)
        raw_rows = sized(raw_warm, cfg, 2_000, 40_000)
        twos, raws, raws2, raw_cpu, raw2_cpu = [], [], [], [], []
        for i in range(cfg.reps):
            twos.append(await smtp_daemon_rep(db, f"smtp2-{i}-", rows, daemons))
            for rates, cpus, processes in ((raws, raw_cpu, 1), (raws2, raw2_cpu, 2)):
                rate, cpu_us = await raw_rep(sink, raw_rows, conns, processes)
                rates.append(rate)
                cpus.append(cpu_us)
            log(f"  round {i + 1}: 2 daemons {twos[-1]:,.0f}/s ({rows:,} emails, {daemons.cpu_us[-1]:.0f} µs CPU/email); "
                f"raw 1 process {raws[-1]:,.0f}/s ({raw_cpu[-1]:.0f} µs CPU/message), "
                f"2 processes {raws2[-1]:,.0f}/s ({raw2_cpu[-1]:.0f} µs) ({raw_rows:,} emails)")
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
    res.put("raw_cpu_us", median(raw_cpu))
    res.put("raw2_cpu_us", median(raw2_cpu))


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
