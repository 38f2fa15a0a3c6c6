"""Emails/s through a Resend-like API limited to 2 requests/s (api_sink.py): singly, and batched.

The real CLI daemon with a Resend transport pointed at the loopback sink
(`OUTBOX_MAILER_TRANSPORTS__RESEND__KIND=resend`, `__BASE_URL`, `__API_KEY`,
`__RATE_PER_SECOND=2`) and rows with `transport = 'resend'`, once with `__BATCH=false` and once
with `__BATCH=true`. A backlog larger than the window can drain is inserted with the daemon
started and idle; emails/s = emails the sink accepted from the COMMIT until the window's end,
over the window. A daemon that refuses the BATCH setting, or that sends no batch request with it
on, is reported as "batching not available", not as a failure of the run.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from pathlib import Path

import receipts
from processes import DaemonExited, DaemonProcess, ScriptServer, log

TRANSPORT = "resend"
RATE_LIMIT = 2  # requests/s, the sink's and the transport's
TARGET = 150.0  # emails/s, batched


def sink_stats(port: int) -> dict[str, int]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stats", timeout=10) as answer:
        return json.loads(answer.read())


def daemon_env(port: int, batch: bool) -> dict[str, str]:
    prefix = f"OUTBOX_MAILER_TRANSPORTS__{TRANSPORT.upper()}__"
    return {prefix + "KIND": "resend", prefix + "BASE_URL": f"http://127.0.0.1:{port}", prefix + "API_KEY": "re_bench",
            prefix + "RATE_PER_SECOND": str(RATE_LIMIT), prefix + "BATCH": "true" if batch else "false"}


def batch_refusal(log_text: str) -> str | None:
    """The line of a refused start that names the BATCH setting, if one does."""
    named = [ln.strip() for ln in log_text.splitlines() if "batch" in ln.lower() and "started worker=" not in ln]
    return named[-1][:200] if named else None


async def api_window(db, cfg, workdir: Path, smtp_port: int, batch: bool) -> dict[str, object]:
    mode = "batch" if batch else "single"
    seconds = cfg.api_seconds
    backlog = int(1.25 * 100 * RATE_LIMIT * seconds) + 200  # more than a 100-email batch per request can drain
    cols = receipts.columns(f"api-{mode}-", 1, backlog)
    await db.truncate()
    with ScriptServer("api_sink.py", [], seconds + 180, workdir / f"api-sink-{mode}.log") as sink:
        daemon = DaemonProcess(db.url, smtp_port, 0, f"api-{mode}", cfg.log_level, workdir,
                               concurrency=cfg.api_concurrency, extra_env=daemon_env(sink.port, batch))
        try:
            daemon.wait_started()
        except DaemonExited as exc:
            daemon.stop()
            why = batch_refusal(exc.log) if batch else None
            if why is None:
                raise
            return {"available": False, "why": f"the daemon refused the setting: {why}"}
        try:
            await asyncio.sleep(0.5)  # idle, connected
            before = await asyncio.to_thread(sink_stats, sink.port)
            await db.conn.execute("BEGIN")
            await receipts.insert(db.conn, cols, TRANSPORT)
            start = time.time()
            await db.conn.execute("COMMIT")
            await asyncio.sleep(max(0.0, start + seconds - time.time()))
            after = await asyncio.to_thread(sink_stats, sink.port)
            elapsed = time.time() - start
            sent = await db.count(f"api-{mode}-", "sent")
        finally:
            # the window is measured: a clean stop would drain its in-flight sends at 2 requests/s (16 s for 32)
            daemon.stop(timeout=3.0)
    d = {k: after.get(k, 0) - before.get(k, 0) for k in ("requests", "rate_limited", "emails", "batches", "batch_emails",
                                                          "replays", "invalid")}
    r: dict[str, object] = {"available": True, "rate": d["emails"] / elapsed, "seconds": elapsed, "sent_rows": sent,
                            "max_batch": after.get("max_batch", 0), **d}
    if batch and not d["batches"]:
        r.update(available=False, why="the daemon sent one request per email with BATCH=true")
    return r


async def measure_api(db, cfg, res, workdir: Path, smtp_port: int) -> None:
    log(f"API: 1 daemon, Resend transport to a loopback Resend-like API limited to {RATE_LIMIT} requests/s, "
        f"concurrency {cfg.api_concurrency or 'default'}, {cfg.api_seconds:g} s windows: BATCH=false, then BATCH=true")
    figures = {}
    for batch in (False, True):
        try:
            r = await api_window(db, cfg, workdir, smtp_port, batch)
        except Exception as exc:  # noqa: BLE001 - a broken window must not cost the run its other figures
            await db.part_failed(res, f"API ({'batched' if batch else 'singly'})", exc)
            continue
        figures["batch" if batch else "single"] = r
        if r.get("rate") is not None:
            log(f"  {'batched' if batch else 'singly'}: {r['rate']:,.1f} emails/s ({r['emails']} emails in "
                f"{r['requests']} requests, {r['batches']} of them batches, {r['rate_limited']} answered 429; "
                f"{r['sent_rows']} rows sent in the database)" + ("" if r["available"] else f"; {r['why']}"))
        else:
            log(f"  batched: not available: {r['why']}")
    await db.truncate()
    res.put("api", figures)


def report_rows(figures: dict[str, object], concurrency: int) -> list[tuple[str, ...]]:
    api = figures.get("api") or {}
    rows = []
    label = (f"Through a Resend-like API limited to {RATE_LIMIT} requests/s, 1 daemon process "
             f"(CONCURRENCY {concurrency or 'default'})")
    single, batch = api.get("single"), api.get("batch")
    if single:
        rows.append((f"{label}, one email per request (BATCH=false)", f"{single['rate']:,.1f} emails/s",
                     f"{single['requests']} requests in {single['seconds']:.0f} s, {single['rate_limited']} answered 429",
                     "", "reported", ""))
    if batch:
        if batch.get("rate") is not None and batch["available"]:
            ratio = f"{batch['rate'] / single['rate']:.0f}x singly" if single and single["rate"] else ""
            rows.append((f"{label}, batched (BATCH=true)", f"{batch['rate']:,.1f} emails/s",
                         f"{batch['requests']} requests, {batch['batches']} batches of up to {batch['max_batch']}, "
                         f"{batch['rate_limited']} answered 429", ratio, "≥ 150 emails/s",
                         "**met**" if batch["rate"] >= TARGET else "**missed**"))
        else:
            got = f"; {batch['rate']:,.1f} emails/s" if batch.get("rate") is not None else ""
            rows.append((f"{label}, batched (BATCH=true)", f"batching not available ({batch['why']}{got})", "", "",
                         "≥ 150 emails/s", "**missed**"))
    return rows
