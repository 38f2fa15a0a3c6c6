"""Drain: PostgreSQL CPU and WAL per email of one daemon at default settings, the app's INSERT included.

The application inserts 5,000 receipts (receipts.py; quick: 1,000) one row per transaction, as a
web request that sends one email does; then one real CLI daemon (`python -m outbox_mailer run`,
at its default settings) starts and drains them to Postfix's smtp-sink (no delay: the
daemon's own pace). Each round: VACUUM (ANALYZE) and a CHECKPOINT first, as realistic.py does.

Two parts, each measured on its own: the INSERTs (WAL from the first to the last COMMIT; the CPU of
PostgreSQL's whole process tree meanwhile, nothing else running) and the daemon (from its start,
its start-up's statements included, until every row is final and 0.5 s more; the tree's CPU minus
this benchmark connection's own backend, which polls a few rows' status). Their sum is what
PostgreSQL spends per email. The daemon part's statements are counted by kind with
pg_stat_statements (statement_counts.py), which is on for that part.

Its rounds alternate with the reference's, django-post_office on the same receipts, cluster and
smtp-sink (post_office_drain.py); each round starts with both databases vacuumed.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import receipts
from common import daemon_defaults, median
from post_office_drain import PostOfficeDrain
from processes import DaemonProcess, log
from realistic import insert_lsn, wal_between
from statement_counts import Counting, describe, per_email

ROWS, QUICK_ROWS = 5_000, 1_000
SETTLE_SECONDS = 0.5


async def insert_one_per_transaction(db, cols: list[list[str]]) -> None:
    for i in range(len(cols[0])):
        await receipts.insert(db.conn, [[c[i]] for c in cols])  # its own transaction: autocommit


async def drain_round(db, sink_port: int, workdir: Path, prefix: str, rows: int, log_level: str) -> dict[str, object]:
    cols = receipts.columns(prefix, 1, rows)  # rendered before the measurement
    keys = cols[0][-10:] + cols[0][:: max(1, rows // 20)]
    await db.conn.execute("VACUUM (ANALYZE)")
    await db.conn.execute("CHECKPOINT")
    checkpoints = await db.checkpoints()
    lsn0, pg0 = await insert_lsn(db), await db.server_cpu_seconds()
    await insert_one_per_transaction(db, cols)
    lsn1, pg1 = await insert_lsn(db), await db.server_cpu_seconds()
    own1 = db.own_cpu_seconds()
    async with Counting(db) as counting:
        started = time.time()
        with DaemonProcess(db.url, sink_port, 0, prefix.rstrip("-"), log_level, workdir, concurrency=0) as daemon:
            await db.wait_final(keys, timeout=120 + rows / 50)
            await asyncio.sleep(SETTLE_SECONDS)
            lsn2, pg2, own2 = await insert_lsn(db), await db.server_cpu_seconds(), db.own_cpu_seconds()
            kinds = await counting.kinds()
            sent = await db.count(prefix, "sent")
            if sent != rows:
                raise RuntimeError(f"drain: {sent} of {rows} rows sent (see {daemon.log_path})")
    r: dict[str, object] = {
        "insert_cpu_us": 1e6 * (pg1 - pg0) / rows,
        "insert_wal": await wal_between(db, lsn0, lsn1) / rows,
        "pg_cpu_us": 1e6 * ((pg2 - pg1) - (own2 - own1)) / rows,
        "wal": await wal_between(db, lsn1, lsn2) / rows,
        "rate": rows / (await db.last_update(prefix) - started),
        "checkpoints": await db.checkpoints() - checkpoints,
        "statements": describe(kinds, rows),
    }
    r.update(per_email(kinds, rows))
    return r


async def measure_drain(db, cfg, res, sink_port: int, workdir: Path) -> None:
    """Our rounds alternating with django-post_office's (post_office_drain.py) on the same receipts; a
    failure stops only the side it happened on."""
    rows = QUICK_ROWS if cfg.quick else ROWS
    log(f"drain: the app inserts {rows:,} receipts one per transaction, then 1 daemon (default pool and "
        f"concurrency) drains them to smtp-sink; {cfg.reps} rounds, each after a CHECKPOINT, alternating with "
        "django-post_office (mail.send one per transaction, then send_queued_mail at its defaults)")
    theirs = PostOfficeDrain(db, sink_port, workdir, rows)

    async def ours(i: int) -> dict[str, object]:
        await theirs.vacuum()  # drain_round vacuums ours
        r = await drain_round(db, sink_port, workdir, f"drain-{i}-", rows, cfg.log_level)
        log(f"  round {i + 1}: PostgreSQL per email: daemon {r['pg_cpu_us']:.0f} µs, {r['wal'] / 1024:.2f} KB; "
            f"the app's INSERT {r['insert_cpu_us']:.0f} µs, {r['insert_wal'] / 1024:.2f} KB; "
            f"{r['rate']:,.0f}/s; {r['checkpoints']} checkpoint(s) inside")
        log(f"    statements: {r['statements']}")
        return r

    async def reference(i: int) -> dict[str, object]:
        r = await theirs.round(i)
        log(f"  round {i + 1}, django-post_office: PostgreSQL per email: send_queued_mail {r['pg_cpu_us']:.0f} µs, "
            f"{r['wal'] / 1024:.2f} KB; the app's mail.send {r['insert_cpu_us']:.0f} µs, "
            f"{r['insert_wal'] / 1024:.2f} KB; {r['rate']:,.0f}/s; {r['statements_per_email']:.2f} statements "
            f"per email; {r['checkpoints']} checkpoint(s) inside")
        log(f"    statements: {r['statements']}")
        return r

    sides = {"drain": ours, "post_office_drain": reference}
    try:
        await theirs.setup()
    except Exception as exc:  # noqa: BLE001 - one broken part must not cost the run its other figures
        await db.part_failed(res, "drain, django-post_office", exc)
        del sides["post_office_drain"]
    rounds: dict[str, list[dict[str, object]]] = {key: [] for key in sides}
    try:
        for i in range(cfg.reps):
            for key, side in list(sides.items()):
                try:
                    rounds[key].append(await side(i))
                except Exception as exc:  # noqa: BLE001 - as above
                    await db.part_failed(res, key.replace("post_office_drain", "drain, django-post_office"), exc)
                    del sides[key]
    finally:
        await theirs.close()
    for key in sides:
        res.put(key, figure(rounds[key], rows))


def figure(rounds: list[dict[str, object]], rows: int) -> dict[str, object]:
    """The medians of the rounds' numbers, the rounds themselves and the checkpoints inside them all."""
    numeric = [k for k, v in rounds[0].items() if isinstance(v, float | int) and k != "checkpoints"]
    fig: dict[str, object] = {k: median([float(r[k]) for r in rounds]) for k in numeric}
    fig.update(rows=rows, rounds=rounds, checkpoints=sum(int(r["checkpoints"]) for r in rounds))
    return fig


def report_rows(figures: dict[str, object]) -> list[tuple[str, ...]]:
    f = figures.get("drain")
    if not f:
        return []
    inside = f["checkpoints"]
    label = (f"Drain: the app inserts {f['rows']:,} receipts one per transaction, then 1 daemon process at default "
             f"settings ({daemon_defaults()}) sends them to smtp-sink; a CHECKPOINT before each round "
             f"({inside if inside else 'none'} inside)")
    total_cpu, total_wal = f["pg_cpu_us"] + f["insert_cpu_us"], f["wal"] + f["insert_wal"]
    ours = (f"PostgreSQL {total_cpu:.0f} µs and {total_wal / 1024:.2f} KB WAL per email: the daemon "
            f"{f['pg_cpu_us']:.0f} µs, {f['wal'] / 1024:.2f} KB + the app's INSERT {f['insert_cpu_us']:.0f} µs, "
            f"{f['insert_wal'] / 1024:.2f} KB; {f['rate']:,.0f}/s")
    ref = (f"statements per email: claims {f['claims_per_email']:.2f} ({f['rows_per_claim']:.1f} rows each), "
           f"outcome writes {f['writes_per_email']:.2f} ({f['rows_per_write']:.1f} rows each), "
           f"others {f['others_per_email']:.2f}")
    return [(label, ours, ref, "", "reported", "")]


def details(figures: dict[str, object]) -> list[str]:
    out = []
    for key, label in (("drain", "drain: PostgreSQL (daemon + INSERT) "),
                       ("post_office_drain", "django-post_office: PostgreSQL (drain + mail.send) ")):
        if not (f := figures.get(key)):
            continue
        rounds = f["rounds"]
        out.append(label + ", ".join(f"{r['pg_cpu_us']:.0f} + {r['insert_cpu_us']:.0f}" for r in rounds) + " µs, WAL "
                   + ", ".join(f"{r['wal'] / 1024:.2f} + {r['insert_wal'] / 1024:.2f}" for r in rounds) + " KB, "
                   + ", ".join(f"{r['rate']:,.0f}" for r in rounds) + " /s")
    return out
