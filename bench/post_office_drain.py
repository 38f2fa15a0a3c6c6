"""The drain's reference: django-post_office queuing and sending the same receipts on the same cluster.

drain.py's rounds alternate with these. The same 5,000 receipts (receipts.py; quick: 1,000), the same
PostgreSQL cluster (in a database of their own, ``post_office_bench``, so the tables do not mix) and
the same smtp-sink, measured the same way, in two parts:

- the application's side: post_office_app.py (a Django process; the module is also its settings)
  calls ``post_office.mail.send(recipients=[...], sender=..., subject=..., message=text,
  html_message=html, priority="medium")`` once per receipt, each in its own transaction. WAL from
  the first to the last COMMIT and the CPU of PostgreSQL's whole process tree until the process
  has exited (its connection's end included; it has connected and rendered everything before).
- the drain: ``python -m django send_queued_mail`` with django-post_office's defaults (1 process, 5
  threads, batches of 100, a Log row per email; its lock file in the scratch directory, so that no
  other checkout's run on the machine holds it). One invocation sends batch after batch until
  nothing is queued, then exits. From its start to its exit and 0.5 s more: WAL, and the tree's CPU
  minus the benchmark connections' own backends. Statements counted with pg_stat_statements on, as
  for ours (the same small cost per statement on both sides).

Each round: VACUUM (ANALYZE) of both databases and a CHECKPOINT first; it fails unless every email
of the round ends ``sent`` (status 0) and none is left queued.
"""

from __future__ import annotations

import asyncio
import os
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from bench_db import Db
from common import BENCH_DIR
from processes import PY
from realistic import insert_lsn, wal_between
from statement_counts import Counting, describe

DB_NAME = "post_office_bench"
SETTLE_SECONDS = 0.5
SENT = 0  # post_office.models.STATUS.sent


def _database_url(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + DB_NAME))


class PostOfficeDrain:
    """``await setup()`` once, then ``await round(i)`` per round; ``await close()`` at the end."""

    def __init__(self, db: Db, sink_port: int, workdir: Path, rows: int) -> None:
        self.db, self.workdir, self.rows = db, workdir, rows
        self.po = Db(_database_url(db.url))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
        self.env.update(DJANGO_SETTINGS_MODULE="post_office_app", OUTBOX_BENCH_PO_DATABASE=self.po.url,
                        OUTBOX_BENCH_PO_SMTP_PORT=str(sink_port),
                        PYTHONPATH=os.pathsep.join(filter(None, [str(BENCH_DIR), os.environ.get("PYTHONPATH")])))

    async def _run(self, args: list[str], log_name: str, timeout: float) -> float:
        """A Django process to its end; returns the wall-clock time it started at."""
        started = time.time()
        with open(self.workdir / log_name, "wb") as out:
            proc = await asyncio.create_subprocess_exec(PY, *args, stdin=asyncio.subprocess.DEVNULL, stdout=out,
                                                        stderr=out, cwd=str(BENCH_DIR), env=self.env)
            try:
                code = await asyncio.wait_for(proc.wait(), timeout)
            except TimeoutError:
                proc.kill()
                await proc.wait()
                raise RuntimeError(f"{' '.join(args)} did not finish within {timeout:g} s") from None
        if code != 0:
            tail = (self.workdir / log_name).read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{' '.join(args)} exited {code}: {tail}")
        return started

    async def setup(self) -> None:
        if not await self.db.conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", DB_NAME):
            await self.db.conn.execute(f"CREATE DATABASE {DB_NAME}")
        await self._run(["-m", "django", "migrate", "-v", "0"], "post-office-migrate.log", 300)
        await self.po.open()

    async def vacuum(self) -> None:
        if self.po.conn is not None:
            await self.po.conn.execute("VACUUM (ANALYZE)")

    async def close(self) -> None:
        if self.po.conn is not None:
            await self.po.conn.close()

    def own_cpu_seconds(self) -> float:
        return self.db.own_cpu_seconds() + self.po.own_cpu_seconds()

    async def _queue(self, first: int) -> tuple[str, float, str, float]:
        """The application's mail.send calls, from READY to DONE (WAL) and to its exit (CPU: its
        connection's end included): the LSNs and the tree's CPU seconds before and after."""
        proc = await asyncio.create_subprocess_exec(
            PY, str(BENCH_DIR / "post_office_app.py"), str(first), str(self.rows), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=str(BENCH_DIR), env=self.env)
        try:
            await self._expect(proc, b"READY\n", 120)
            lsn0, pg0 = await insert_lsn(self.po), await self.po.server_cpu_seconds()
            proc.stdin.write(b"go\n")
            await proc.stdin.drain()
            await self._expect(proc, b"DONE\n", 120 + self.rows / 10)
            lsn1 = await insert_lsn(self.po)
            await asyncio.wait_for(proc.wait(), 30)  # it exits after DONE
            return lsn0, pg0, lsn1, await self.po.server_cpu_seconds()
        finally:
            if proc.returncode is None:  # stopped halfway: it must not go on queuing
                proc.kill()
                await proc.wait()

    @staticmethod
    async def _expect(proc: asyncio.subprocess.Process, line: bytes, timeout: float) -> None:
        got = await asyncio.wait_for(proc.stdout.readline(), timeout)
        if got != line:
            out = (got + await asyncio.wait_for(proc.stdout.read(), 30)).decode(errors="replace").strip()
            last = out.splitlines()[-1] if out else "no output"
            raise RuntimeError(f"post_office_app.py: {last}\n{out[-2000:]}")

    async def round(self, i: int) -> dict[str, object]:
        po = self.po
        await self.db.conn.execute("VACUUM (ANALYZE)")  # ours too, as drain.py's rounds vacuum both
        await self.vacuum()
        await po.conn.execute("CHECKPOINT")
        checkpoints = await po.checkpoints()
        before = int(await po.conn.fetchval("SELECT coalesce(max(id), 0) FROM post_office_email"))
        lsn0, pg0, lsn1, pg1 = await self._queue(1 + i * self.rows)
        own1 = self.own_cpu_seconds()
        async with Counting(self.db) as counting:
            started = await self._run(["-m", "django", "send_queued_mail", "--lockfile",
                                       str(self.workdir / "post-office-lock")], f"post-office-{i}.log",
                                      120 + self.rows / 20)
            await asyncio.sleep(SETTLE_SECONDS)
            lsn2, pg2, own2 = await insert_lsn(po), await po.server_cpu_seconds(), self.own_cpu_seconds()
            kinds = await counting.kinds()
        sent, unsent, last = await po.conn.fetchrow(
            "SELECT count(*) FILTER (WHERE status = $2), count(*) FILTER (WHERE status IS DISTINCT FROM $2), "
            "extract(epoch FROM max(last_updated))::float8 FROM post_office_email WHERE id > $1", before, SENT)
        if sent != self.rows or unsent:
            raise RuntimeError(f"django-post_office: {sent} of {self.rows} emails sent, {unsent} not "
                               f"(see {self.workdir / f'post-office-{i}.log'})")
        rows = self.rows
        return {
            "insert_cpu_us": 1e6 * (pg1 - pg0) / rows,
            "insert_wal": await wal_between(po, lsn0, lsn1) / rows,
            "pg_cpu_us": 1e6 * ((pg2 - pg1) - (own2 - own1)) / rows,
            "wal": await wal_between(po, lsn1, lsn2) / rows,
            "rate": rows / (last - started),
            "checkpoints": await po.checkpoints() - checkpoints,
            "statements_per_email": sum(k.calls for k in kinds) / rows,
            "statements": describe(kinds, rows),
        }


def report_rows(figures: dict[str, object]) -> list[tuple[str, ...]]:
    theirs, ours = figures.get("post_office_drain"), figures.get("drain")
    if not theirs:
        return []
    t_total, t_wal = theirs["pg_cpu_us"] + theirs["insert_cpu_us"], theirs["wal"] + theirs["insert_wal"]
    rows = [(f"Drain, django-post_office {_version('django-post_office')} (Django {_version('django')}): the app queues the same "
             f"{theirs['rows']:,} receipts with `mail.send`, one per transaction; then `send_queued_mail` at its "
             "defaults (1 process, 5 threads, batches of 100) sends them to the same smtp-sink; a CHECKPOINT "
             f"before each round ({theirs['checkpoints'] or 'none'} inside)", "",
             f"PostgreSQL {t_total:.0f} µs and {t_wal / 1024:.2f} KB WAL per email: "
             f"the drain {theirs['pg_cpu_us']:.0f} µs, {theirs['wal'] / 1024:.2f} KB + the app's `mail.send` "
             f"{theirs['insert_cpu_us']:.0f} µs, {theirs['insert_wal'] / 1024:.2f} KB; {theirs['rate']:,.0f}/s; "
             f"{theirs['statements_per_email']:.2f} statements per email in the drain", "", "reported", "")]
    if ours:
        o_total, o_wal = ours["pg_cpu_us"] + ours["insert_cpu_us"], ours["wal"] + ours["insert_wal"]
        ratio, drain_ratio = o_total / t_total, ours["pg_cpu_us"] / theirs["pg_cpu_us"]
        rows.append(("PostgreSQL CPU per email, drain at default settings: outbox-mailer over django-post_office "
                     "(INSERT + drain summed; the drain alone)",
                     f"{o_total:.0f} µs (drain {ours['pg_cpu_us']:.0f} µs); WAL {o_wal / 1024:.2f} KB; "
                     f"{ours['rate']:,.0f}/s",
                     f"django-post_office: {t_total:.0f} µs (drain {theirs['pg_cpu_us']:.0f} µs); WAL "
                     f"{t_wal / 1024:.2f} KB; {theirs['rate']:,.0f}/s",
                     f"{ratio:.2f}x (drain alone {drain_ratio:.2f}x)", "< 1.0x (the user's database pays less)",
                     f"{_mark(ratio < 1.0)} (drain alone: {_mark(drain_ratio < 1.0)})"))
    return rows


def _version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


def _mark(ok: bool) -> str:
    return "**met**" if ok else "**missed**"

