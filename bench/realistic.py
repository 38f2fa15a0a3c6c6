"""Realistic conditions: PostgreSQL CPU and WAL per email with the real daemon and a slow relay.

The real CLI daemon (`python -m outbox_mailer run`, configured by environment) sends 1.8 KB
receipts (receipts.py) to relay_sink.py, a loopback SMTP relay that answers the end of DATA
20 ms (or 50 ms) after it. Two cases: `SMTP__POOL_SIZE=8` and `CONCURRENCY=32` with a 20 ms
relay (the configuration's advice for throughput), and the daemon's default pool and
concurrency with a 50 ms relay.

One window per round, with the daemon started, warm and idle: VACUUM, then CHECKPOINT (every
window starts a checkpoint cycle, so figures are comparable; the checkpoint counters say whether
another fell inside), then the application's INSERT of all the window's rows in one transaction,
then the daemon drains them. The INSERT's own WAL (up to just before COMMIT) and its backend's
CPU are reported apart, as "the app's INSERT"; the figures are the rest of the window: WAL from
just before COMMIT until the last row is final (plus 0.5 s for work done just after), and the
CPU of PostgreSQL's whole process tree minus this benchmark connection's own backend (its INSERT
and its light polling). The VACUUM after each window (of what the window left behind) is
measured too, for information.

With --statements, each window also counts the statements the daemon ran, by kind (claims and outcome
writes per email and their rows each: statement_counts.py); pg_stat_statements is on for those
windows, which costs PostgreSQL a little per statement.

With OUTBOX_BENCH_WALDUMP=DIR, each window's WAL (from COMMIT to the end) is also summarised by
`pg_waldump --stats=record` into DIR/<prefix>.txt, followed by the bytes per relation and record
type: which records, full-page images included, make up the WAL per email, and on which tables.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import receipts
from common import daemon_defaults, median
from processes import DaemonProcess, ScriptServer, log
from statement_counts import Counting, describe, per_email

TARGET_WAL = 1.6 * 1024
SETTLE_SECONDS = 0.5


@dataclass(frozen=True)
class Case:
    key: str
    label: str
    relay_ms: float
    pool: int  # 0: the daemon's default
    concurrency: int  # 0: the daemon's default
    rows: int  # emails per window (full run); --quick: a quarter
    ceiling: float  # the relay's bound, emails/s: connections / delay
    target_pg_cpu_us: float  # issue 33: 100 µs with pool 8, 150 µs at the defaults


CASES = (
    Case("tuned", "relay 20 ms per message, pool 8, concurrency 32", 20, 8, 32, 4_000, 8 / 0.020, 100.0),
    Case("default", f"relay 50 ms per message, the default settings ({daemon_defaults()})", 50, 0, 0, 800, 4 / 0.050, 150.0),
)


async def wal_between(db, a: str, b: str) -> float:
    return float(await db.conn.fetchval("SELECT pg_wal_lsn_diff($1::text::pg_lsn, $2::text::pg_lsn)", b, a))


async def insert_lsn(db) -> str:
    # the insert position, not the write position: a large INSERT's last WAL may still sit in wal_buffers
    return await db.conn.fetchval("SELECT pg_current_wal_insert_lsn()::text")


async def vacuum_cost(db, rows: int) -> dict[str, float]:
    lsn, cpu = await insert_lsn(db), await db.server_cpu_seconds()
    await db.conn.execute("VACUUM (ANALYZE)")
    return {"vacuum_cpu_us": 1e6 * (await db.server_cpu_seconds() - cpu) / rows,
            "vacuum_wal": await wal_between(db, lsn, await insert_lsn(db)) / rows}


async def waldump(db, prefix: str, start: str, end: str) -> None:
    into = os.environ.get("OUTBOX_BENCH_WALDUMP")
    if not into:
        return
    await db.conn.execute("SELECT pg_switch_wal()")  # so the segment holding `end` is complete on disk
    wal = Path(await db.conn.fetchval("SHOW data_directory")) / "pg_wal"
    tool = Path(await db.conn.fetchval("SELECT setting FROM pg_config WHERE name = 'BINDIR'")) / "pg_waldump"
    stats = subprocess.run([str(tool), "--stats=record", "-p", str(wal), "-s", start, "-e", end],
                           capture_output=True, text=True, check=False)
    records = subprocess.run([str(tool), "-p", str(wal), "-s", start, "-e", end],
                             capture_output=True, text=True, check=False)
    names = {str(r["filenode"]): r["relname"] for r in await db.conn.fetch(
        "SELECT pg_relation_filenode(c.oid) AS filenode, c.relname FROM pg_class c "
        "WHERE pg_relation_filenode(c.oid) IS NOT NULL")}
    sizes: dict[tuple[str, str], list[int]] = {}
    for line in records.stdout.splitlines():
        found = re.search(r"rmgr: (\S+)\s+len \(rec/tot\):\s*\d+/\s*(\d+).*?desc: (\S+)", line)
        if found is None:
            continue
        rel = re.search(r"rel \d+/\d+/(\d+)", line)
        key = (names.get(rel[1], rel[1]) if rel else "-", f"{found[1]}/{found[3]}")
        entry = sizes.setdefault(key, [0, 0])
        entry[0] += 1
        entry[1] += int(found[2])
    table = [f"{rel:45} {kind:28} {n:7} {size:10}" for (rel, kind), (n, size)
             in sorted(sizes.items(), key=lambda item: -item[1][1])]
    Path(into).mkdir(parents=True, exist_ok=True)
    (Path(into) / f"{prefix}.txt").write_text(stats.stdout + stats.stderr + "\nrelation, record: count, bytes\n"
                                              + "\n".join(table) + "\n")


async def window(db, daemon: DaemonProcess, case: Case, prefix: str, rows: int,
                 count: bool = False) -> dict[str, float]:
    cols = receipts.columns(prefix, 1, rows)  # rendered before the window
    keys = cols[0][-10:] + cols[0][:: max(1, rows // 20)]  # polled until final: the last rows and a sample
    await db.conn.execute("VACUUM (ANALYZE)")
    await db.conn.execute("CHECKPOINT")
    async with contextlib.AsyncExitStack() as stack:
        counting = await stack.enter_async_context(Counting(db)) if count else None
        r = await _window(db, daemon, case, prefix, rows, cols, keys)
        if counting is not None:
            kinds = await counting.kinds()
            r.update(per_email(kinds, rows))
            log(f"    statements: {describe(kinds, rows)}")
    r.update(await vacuum_cost(db, rows))
    return r


async def _window(db, daemon: DaemonProcess, case: Case, prefix: str, rows: int, cols: list[list[str]],
                  keys: list[str]) -> dict[str, float]:
    checkpoints = await db.checkpoints()
    lsn0, pg0, own0, daemon0 = await insert_lsn(db), await db.server_cpu_seconds(), db.own_cpu_seconds(), \
        daemon.cpu_seconds()
    await db.conn.execute("BEGIN")
    await receipts.insert(db.conn, cols)
    lsn_commit = await insert_lsn(db)
    committed = time.time()
    await db.conn.execute("COMMIT")  # the daemon hears of the rows with it
    own_insert = db.own_cpu_seconds()
    await db.wait_final(keys, timeout=60 + 5 * rows / case.ceiling)
    await asyncio.sleep(SETTLE_SECONDS)
    lsn1, pg1, own1, daemon1 = await insert_lsn(db), await db.server_cpu_seconds(), db.own_cpu_seconds(), \
        daemon.cpu_seconds()
    checkpoints = await db.checkpoints() - checkpoints
    await waldump(db, prefix, lsn_commit, lsn1)
    sent = await db.count(prefix, "sent")
    if sent != rows:
        raise RuntimeError(f"realistic {case.key}: {sent} of {rows} rows sent (see {daemon.log_path})")
    r = {
        "rate": rows / (await db.last_update(prefix) - committed),
        "pg_cpu_us": 1e6 * ((pg1 - pg0) - (own1 - own0)) / rows,
        "wal": await wal_between(db, lsn_commit, lsn1) / rows,
        "daemon_cpu_us": 1e6 * (daemon1 - daemon0) / rows,
        "insert_cpu_us": 1e6 * (own_insert - own0) / rows,
        "insert_wal": await wal_between(db, lsn0, lsn_commit) / rows,
        "checkpoints": checkpoints,
    }
    return r


async def measure_case(db, cfg, case: Case, rows: int, workdir: Path) -> list[dict[str, float]]:
    lifetime = 120 + cfg.reps * (60 + 3 * rows / case.ceiling)
    with ScriptServer("relay_sink.py", [f"{case.relay_ms:g}", str(workdir / f"relay-{case.key}.json")],
                      lifetime, workdir / f"relay-{case.key}.log") as relay, \
            DaemonProcess(db.url, relay.port, case.pool, f"real-{case.key}", cfg.log_level, workdir,
                          concurrency=case.concurrency) as daemon:
        warm = receipts.columns(f"real-{case.key}-warm-", 1, 200)
        await receipts.insert(db.conn, warm)  # connections opened, statements prepared
        await db.wait_final(warm[0][-5:], timeout=60)
        rounds = []
        for i in range(cfg.reps):
            rounds.append(await window(db, daemon, case, f"real-{case.key}-{i}-", rows, cfg.statements))
            r = rounds[-1]
            log(f"  round {i + 1}: PostgreSQL {r['pg_cpu_us']:.0f} µs and {r['wal'] / 1024:.2f} KB WAL per email, "
                f"daemon {r['daemon_cpu_us']:.0f} µs, {r['rate']:,.0f}/s; the app's INSERT "
                f"{r['insert_cpu_us']:.0f} µs, {r['insert_wal'] / 1024:.2f} KB; VACUUM afterwards "
                f"{r['vacuum_cpu_us']:.0f} µs, {r['vacuum_wal'] / 1024:.2f} KB; "
                f"{r['checkpoints']} checkpoint(s) inside")
    return rounds


async def measure_realistic(db, cfg, res, workdir: Path) -> None:
    figures: dict[str, dict[str, object]] = {}
    for case in CASES:
        rows = case.rows // 4 if cfg.quick else case.rows
        log(f"realistic: 1 daemon, {case.label}, {rows:,} receipts of ~1.8 KB per window, {cfg.reps} windows, "
            "each after a CHECKPOINT; PostgreSQL CPU and WAL per email without the app's INSERT"
            + ("; statements counted (pg_stat_statements on)" if cfg.statements else ""))
        try:
            rounds = await measure_case(db, cfg, case, rows, workdir)
        except Exception as exc:  # noqa: BLE001 - one broken case must not cost the run its other figures
            await db.part_failed(res, f"realistic ({case.key})", exc)
            continue
        fig: dict[str, object] = {k: median([r[k] for r in rounds]) for k in rounds[0] if k != "checkpoints"}
        fig.update(rows=rows, rounds=rounds, checkpoints=sum(r["checkpoints"] for r in rounds))
        figures[case.key] = fig
    res.put("realistic", figures)


def report_rows(figures: dict[str, object]) -> list[tuple[str, ...]]:
    rows = []
    for case in CASES:
        f = (figures.get("realistic") or {}).get(case.key)
        if not f:
            continue
        inside = f["checkpoints"]
        label = (f"Realistic: 1 daemon process, {case.label}, receipts of ~1.8 KB; {f['rows']:,} emails per window, "
                 f"a CHECKPOINT before each ({inside if inside else 'none'} inside the windows)")
        ours = (f"PostgreSQL {f['pg_cpu_us']:.0f} µs and {f['wal'] / 1024:.2f} KB WAL per email; daemon "
                f"{f['daemon_cpu_us']:.0f} µs; {f['rate']:,.0f}/s")
        ref = (f"the app's INSERT (one statement per window): PostgreSQL {f['insert_cpu_us']:.0f} µs, "
               f"{f['insert_wal'] / 1024:.2f} KB; VACUUM afterwards: {f['vacuum_cpu_us']:.0f} µs, "
               f"{f['vacuum_wal'] / 1024:.2f} KB")
        ok = f["pg_cpu_us"] <= case.target_pg_cpu_us and f["wal"] <= TARGET_WAL
        rows.append((label, ours, ref, "", f"PostgreSQL ≤ {case.target_pg_cpu_us:.0f} µs, WAL ≤ 1.6 KB",
                     "**met**" if ok else "**missed**"))
    return rows


def details(figures: dict[str, object]) -> list[str]:
    out = []
    for key, f in (figures.get("realistic") or {}).items():
        rounds = f["rounds"]
        out.append(f"realistic ({key}): PostgreSQL " + ", ".join(f"{r['pg_cpu_us']:.0f}" for r in rounds)
                   + " µs, WAL " + ", ".join(f"{r['wal'] / 1024:.2f}" for r in rounds) + " KB, "
                   + ", ".join(f"{r['rate']:,.0f}" for r in rounds) + " /s")
    return out
