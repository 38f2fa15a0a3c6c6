"""A soak: the real daemon for a chosen time under mixed faults, watched for leaks, loss and duplicates.

    .venv/bin/python -m bench.soak --minutes 10 [--rate 20] [--seed 1] [--json out.json]
    .venv/bin/python bench/soak.py --minutes 2          # the same, as a script

One throwaway PostgreSQL (``outbox_mailer.devtools.pgcluster``, ``synchronous_commit`` on, so that a crash of
the server loses no acknowledged commit), one SMTP sink in this process on 127.0.0.1 (no
PIPELINING, replies after up to 20 ms), and the real daemon as a subprocess (``python -m
outbox_mailer run``, or ``--cli PATH`` for an installed ``outbox-mailer``), configured by environment
with short timeouts (``SETTINGS`` in soak_plan.py) so that every fault settles within seconds. A
producer commits one row per transaction at ``--rate`` rows/s; a seeded scheduler injects, one at a
time:

* ``smtp_drop``: for 2-5 s, 30-60 % of the SMTP transactions are cut by the sink closing the
  connection at MAIL, RCPT, DATA or after reading the whole message without answering it (the
  one that leaves the daemon in doubt);
* ``smtp_outage``: for 2-6 s the sink closes every connection and either refuses new ones (its
  listening socket closed) or greets them with 421 and closes;
* ``pg_restart``: PostgreSQL shut down ``fast`` (SIGINT, as ``pg_ctl restart -m fast``) or, one
  time in four, ``immediate`` (SIGQUIT: a crash and WAL recovery), down 0-2 s, started again;
* ``kill9``: SIGKILL of the daemon (at a moment it has a claim in flight, polled for up to 3 s), a
  new one started 0.3-2 s later (as systemd's Restart= would).

Each kind happens at least once whatever the seed; kill -9 only in the first 40 % of the run
and at least 65 s before its end (see "growth" in soak_verdict.py); a run shorter than two minutes
(75 s at least: soak_plan.SHORTEST_SECONDS) has its gaps scaled down to fit every kind in. Every ``--sample-seconds`` it samples the daemon's VmRSS, open
fds, its TCP sockets to PostgreSQL and to the sink (its fds matched against /proc/PID/net/tcp), the
PostgreSQL backends serving those sockets (pg_stat_activity.client_port), the rows due, sending,
sent, failed and in_doubt, and the copies the sink received; one line per sample, a summary table
and a verdict at the end. Then faults and producer stop and a drain phase waits until every row
is final (at most the rescue delay + 60 s); the daemon is stopped with SIGTERM (it must exit 0).

Verdict: ``judge`` (soak_verdict.py), a pure function; the process exits 1 when it fails. The
other parts: soak_plan.py (the daemon's settings, the fault plan), soak_sink.py (the SMTP sink),
soak_processes.py (the daemons, /proc, PostgreSQL's restarts) and soak_report.py (the sample
lines, the summary); this module runs them: the CLI, the producer, the scheduler, the sampler.

Every process it starts (PostgreSQL, daemons) is stopped by its PID on every exit path.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# (imported after the sys.path insertion above: this file also runs as a script)
from bench.soak_plan import KINDS, RESCUE_AFTER_SECONDS, SETTINGS, plan_faults
from bench.soak_processes import Daemons, proc_figures, restart_postgres
from bench.soak_report import sample_line, summary
from bench.soak_sink import KEY_HEADER, Sink
from bench.soak_verdict import LIMITS, judge


def say(msg: str) -> None:
    print(msg, flush=True)


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        import asyncpg  # noqa: F401  (fail early, before anything starts)

        self.args = args
        self.rng = random.Random(args.seed)
        self.t0 = time.monotonic()
        self.fault_seconds = args.minutes * 60
        self.workdir = Path(tempfile.mkdtemp(prefix="outbox-soak-"))
        self.sink = Sink(random.Random(args.seed + 1))
        self.pg: Any = None
        self.daemons: Daemons | None = None
        self.conns: dict[str, Any] = {}
        self.committed: dict[str, float] = {}
        self.samples: list[dict[str, Any]] = []
        self.faults: list[dict[str, Any]] = []
        self.problems: list[str] = []
        self.explained_keys: set[str] = set()
        self.duplicate_bound_db = 0  # rows in flight at kills and PostgreSQL restarts
        self.producing = True
        self.producer_errors = 0

    def now(self) -> float:
        return time.monotonic() - self.t0

    async def db(self, method: str, query: str, *args: Any, timeout: float = 5.0, user: str = "faults") -> Any:
        """One query on this user's own connection (producer, sampler, faults), opened again when broken."""
        import asyncpg

        conn = self.conns.get(user)
        if conn is None or conn.is_closed():
            conn = self.conns[user] = await asyncpg.connect(
                self.pg.url, timeout=2, server_settings={"application_name": f"outbox-soak-{user}"})
        try:
            return await asyncio.wait_for(getattr(conn, method)(query, *args), timeout)
        except BaseException:
            with contextlib.suppress(Exception):
                conn.terminate()
            self.conns.pop(user, None)
            raise

    async def produce(self) -> None:
        """One row per transaction at --rate rows/s; a failed INSERT is retried (ON CONFLICT DO NOTHING
        makes the retry of a COMMIT whose answer was lost harmless)."""
        n, start = 0, time.monotonic()
        while self.producing:
            wait = start + n / self.args.rate - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            key = f"soak-{n + 1}"
            while True:
                try:
                    await self.db("execute", "INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, "
                                  "text_body, headers) VALUES ($1, ARRAY['rcpt-' || $1 || '@example.com'], "
                                  "'Soak ' || $1, 'Body of message ' || $1, jsonb_build_object($2::text, $1::text)) "
                                  "ON CONFLICT (dedupe_key) DO NOTHING", key, KEY_HEADER, user="producer")
                    break
                except Exception:  # noqa: BLE001  (PostgreSQL down or restarting: retry)
                    self.producer_errors += 1
                    await asyncio.sleep(0.2)
            self.committed[key] = self.now()
            n += 1

    async def sample(self) -> dict[str, Any]:
        assert self.daemons is not None
        if self.daemons.exited_by_itself():
            life = self.daemons.current
            self.problems.append(f"daemon {life['worker']} exited by itself with {life['exit_code']} "
                                 f"at t={life['ended_t']}")
            say(f"!! daemon exited by itself:\n{self.daemons.tail()}")
            if sum(1 for life in self.daemons.lifetimes if life.get("end") == "exited") >= 3:
                raise SystemExit("the daemon exited by itself three times: soak aborted (FAIL)")
            await self.daemons.start()
        pid = self.daemons.current["pid"]
        s: dict[str, Any] = {"t": round(self.now(), 1), "pid": pid,
                             **proc_figures(pid, self.pg.port, self.sink.port)}
        ports = s.pop("pg_ports")
        try:
            row = await self.db("fetchrow", """
                SELECT count(*) FILTER (WHERE status = 'pending' AND scheduled_at <= now()) AS due,
                       count(*) FILTER (WHERE status = 'pending') AS pending,
                       count(*) FILTER (WHERE status = 'sending') AS sending,
                       count(*) FILTER (WHERE status = 'sent') AS sent,
                       count(*) FILTER (WHERE status = 'failed') AS failed,
                       count(*) FILTER (WHERE status = 'in_doubt') AS in_doubt,
                       (SELECT count(*) FROM pg_stat_activity WHERE client_port = ANY($1::int[])) AS pg_backends
                FROM email_deliveries""", ports, timeout=3, user="sampler")
            s.update(dict(row))
        except Exception:  # noqa: BLE001  (PostgreSQL down or restarting)
            s["db"] = "down"
        copies = self.sink.copies
        s.update(committed=len(self.committed), delivered=len(copies),
                 extra_copies=sum(n - 1 for n in copies.values()), faults=len(self.faults))
        return s

    async def sampler(self) -> None:
        say(f"{'t':>6} {'pid':>7} {'rss MB':>7} {'fds':>4} {'pg':>5} {'smtp':>4} {'due':>5} {'sending':>7} "
            f"{'sent':>7} {'failed':>6} {'in_doubt':>8} {'delivered':>9} {'extra':>5} {'faults':>6}")
        while True:
            try:
                s = await self.sample()
            except Exception as exc:  # noqa: BLE001  (keep sampling; the verdict says it went wrong)
                self.problems.append(f"a sample failed at t={self.now():.1f}: {exc!r}")
                await asyncio.sleep(self.args.sample_seconds)
                continue
            self.samples.append(s)
            say(sample_line(s))
            await asyncio.sleep(self.args.sample_seconds)

    async def sending_keys(self, worker: str | None = None) -> set[str]:
        query = "SELECT dedupe_key FROM email_deliveries WHERE status = 'sending'"
        rows = await (self.db("fetch", query + " AND claimed_by = $1", worker) if worker else self.db("fetch", query))
        return {r[0] for r in rows}

    async def inject(self, step: dict[str, Any]) -> dict[str, Any]:
        kind, done = step["kind"], dict(step)
        if kind == "smtp_drop":
            before = sum(self.sink.drops.values())
            self.sink.drop_probability = step["probability"]
            await asyncio.sleep(step["duration"])
            self.sink.drop_probability = 0.0
            done["connections_dropped"] = sum(self.sink.drops.values()) - before
        elif kind == "smtp_outage":
            await self.sink.outage(step["variant"])
            await asyncio.sleep(step["duration"])
            await self.sink.restore()
        elif kind == "pg_restart":
            keys = set()
            with contextlib.suppress(Exception):
                keys = await self.sending_keys()
            await asyncio.to_thread(restart_postgres, self.pg, step["mode"], step["down"])
            with contextlib.suppress(Exception):
                keys |= await self.sending_keys()
            done["in_flight"] = len(keys)
            self.explained_keys |= keys
            self.duplicate_bound_db += len(keys)
        elif kind == "kill9":
            assert self.daemons is not None
            worker = self.daemons.current["worker"]
            deadline = time.monotonic() + 3  # aim at the crash window: a claim of this daemon in flight
            while time.monotonic() < deadline:
                with contextlib.suppress(Exception):
                    if await self.db("fetchval", "SELECT count(*) FROM email_deliveries WHERE status = 'sending' "
                                     "AND claimed_by = $1", worker):
                        break
                await asyncio.sleep(0.005)
            self.daemons.kill9()
            keys = await self.sending_keys(worker)
            done["in_flight"] = len(keys)
            self.explained_keys |= keys
            self.duplicate_bound_db += len(keys)
            await asyncio.sleep(step["restart_after"])
            await self.daemons.start()
        return done

    async def scheduler(self, plan: list[dict[str, Any]]) -> None:
        for step in plan:
            await asyncio.sleep(max(0.0, step["t"] - self.now()))
            started = self.now()
            try:
                done = await self.inject(step)
            except Exception as exc:  # noqa: BLE001  (the verdict says it went wrong)
                self.problems.append(f"fault {step} not injected: {exc!r}")
                continue
            done.update(at=round(started, 1), took=round(self.now() - started, 2))
            self.faults.append(done)
            say(f"-- fault at {started:.1f}s: " + ", ".join(f"{k}={v}" for k, v in done.items() if k != "t"))
        await asyncio.sleep(max(0.0, self.fault_seconds - self.now()))

    async def settled(self) -> bool:
        counts = await self.db("fetchrow", "SELECT count(*) AS n, count(*) FILTER (WHERE status IN "
                               "('pending', 'sending')) AS open FROM email_deliveries")
        return counts["open"] == 0 and counts["n"] >= len(self.committed)

    async def run(self) -> dict[str, Any]:
        from outbox_mailer.devtools.pgcluster import TemporaryPostgres

        args = self.args
        self.pg = TemporaryPostgres(fast=False, extra_settings={"fsync": "off"})  # a crash of the server, not of the OS
        await asyncio.to_thread(self.pg.start)
        command = [args.cli] if args.cli else [sys.executable, "-m", "outbox_mailer"]
        await self.sink.start()
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("OUTBOX_MAILER_") and k not in ("NOTIFY_SOCKET", "JOURNAL_STREAM")}
        env.update(SETTINGS, OUTBOX_MAILER_DATABASE_URL=self.pg.url, OUTBOX_MAILER_SMTP__HOST="127.0.0.1",
                   OUTBOX_MAILER_SMTP__PORT=str(self.sink.port))
        migrated = await asyncio.to_thread(subprocess.run, [*command, "migrate"], check=False, env=env,
                                           capture_output=True, text=True, timeout=120)
        if migrated.returncode != 0:
            raise RuntimeError(f"migrate failed: {migrated.stderr}")
        plan = plan_faults(args.seed, self.fault_seconds)
        say(f"soak: {args.minutes:g} min of faults, {args.rate:g} rows/s, seed {args.seed}, {len(plan)} faults, "
            f"PostgreSQL {self.pg.url}, sink 127.0.0.1:{self.sink.port}, scratch {self.workdir}")
        self.daemons = Daemons(command, env, self.workdir, self.now)
        self.t0 = time.monotonic()
        await self.daemons.start()
        producer = asyncio.create_task(self.produce())
        sampler = asyncio.create_task(self.sampler())
        try:
            await self.scheduler(plan)
            fault_end = self.now()
            self.producing = False
            await asyncio.wait_for(producer, 60)
            say(f"-- faults and producer stopped at {fault_end:.1f}s: draining")
            drain_deadline = time.monotonic() + RESCUE_AFTER_SECONDS + 60
            drained = False
            while time.monotonic() < drain_deadline:
                with contextlib.suppress(Exception):
                    if await self.settled():
                        drained = True
                        break
                await asyncio.sleep(0.5)
            self.samples.append(await self.sample())
        finally:
            for task in (producer, sampler):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        end = self.now()
        exit_code = self.daemons.terminate()
        if exit_code != 0:
            self.problems.append(f"the daemon exited {exit_code} on the final SIGTERM")
        status = {r[0]: r[1] for r in await self.db("fetch", "SELECT dedupe_key, status FROM email_deliveries")}
        ambiguous = {r[0]: r[1] for r in await self.db("fetch", """
            SELECT d.dedupe_key, count(*) FROM email_delivery_attempts a JOIN email_deliveries d ON d.id = a.delivery_id
            WHERE a.outcome = 'ambiguous' GROUP BY 1""")}
        outcomes = {r[0]: r[1] for r in await self.db("fetch", "SELECT outcome, count(*) FROM email_delivery_attempts "
                                                      "GROUP BY 1")}
        unanswered = sum(self.sink.unanswered.values())
        fault_counts = Counter(f["kind"] for f in self.faults)
        fault_counts["pg_restart_immediate"] = sum(1 for f in self.faults if f.get("mode") == "immediate")
        for kind in (*KINDS, "pg_restart_immediate"):
            if not fault_counts[kind]:
                self.problems.append(f"no {kind} fault happened")
        delivery = {"committed": self.committed, "status": status, "copies": dict(self.sink.copies),
                    "ambiguous": ambiguous, "duplicate_bound": unanswered + self.duplicate_bound_db, "end": end}
        verdict = judge(self.samples, fault_end, delivery, self.problems)
        twice = {k for k, n in self.sink.copies.items() if n > 1}
        verdict["delivery"].update(
            drained=drained, unanswered_at_sink=unanswered, in_flight_at_faults=self.duplicate_bound_db,
            duplicate_keys_in_flight_at_a_kill_or_restart=len(twice & self.explained_keys),
            duplicate_keys_unanswered_at_sink=len(twice & set(self.sink.unanswered)))
        return {"config": {"minutes": args.minutes, "rate": args.rate, "seed": args.seed,
                           "sample_seconds": args.sample_seconds, "settings": SETTINGS, "limits": LIMITS},
                "fault_end_t": round(fault_end, 1), "end_t": round(end, 1), "fault_counts": dict(fault_counts),
                "faults": self.faults, "sink": {"connections": self.sink.connections, "drops": dict(self.sink.drops),
                                                "unanswered": unanswered, "messages": sum(self.sink.copies.values())},
                "attempt_outcomes": outcomes, "producer_errors": self.producer_errors,
                "final_status": dict(Counter(status.values())), "lifetimes": self.daemons.lifetimes,
                "samples": self.samples, "verdict": verdict}

    def cleanup(self) -> None:
        """Stop what this run started, by PID: the daemon, the sink, PostgreSQL; remove the scratch."""
        if self.daemons is not None and self.daemons.proc is not None and self.daemons.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.daemons.proc.pid, signal.SIGKILL)
            self.daemons.proc.wait(timeout=10)
        self.sink.close()
        if self.pg is not None:
            self.pg.stop()
        if not self.args.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, required=True, help="length of the fault phase")
    parser.add_argument("--rate", type=float, default=20.0, help="rows committed per second (20)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the fault plan (1)")
    parser.add_argument("--json", help="write the whole result (samples, faults, verdict) here")
    parser.add_argument("--sample-seconds", type=float, default=2.0, help="sampling interval (2)")
    parser.add_argument("--cli", help="an installed outbox-mailer executable (default: python -m outbox_mailer)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory (daemon logs)")
    args = parser.parse_args(argv)
    soak = Soak(args)
    loop_signals = (signal.SIGTERM, signal.SIGHUP)

    async def guarded() -> dict[str, Any]:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        for sig in loop_signals:
            loop.add_signal_handler(sig, task.cancel)  # type: ignore[union-attr]
        return await soak.run()

    try:
        result = asyncio.run(guarded())
    except (KeyboardInterrupt, asyncio.CancelledError):
        say("soak interrupted")
        return 130
    finally:
        soak.cleanup()
    say(summary(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    return 0 if result["verdict"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
