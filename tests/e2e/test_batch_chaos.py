"""Batches under chaos: rows trickling in, slow batch requests answered 500 after accepting, kill -9.

The installed daemon (``outbox-mailer run`` from the built wheel) sends through the Resend
transport, batching, to the fake provider (tests/provider_server.py), which keeps idempotency
keys like Resend and counts each email it creates by the dedupe key in its ``X-Test-Key``
header (a repeat absorbed by a key creates nothing). Every batch request is slow (1-1.5 s), and
a third of all requests accept the emails and then answer 500. Rows are inserted a few at a
time while the daemons run, so a batch gathers rows of several claims, made at different
moments; a daemon is killed with SIGKILL mid-request three times and restarted, and a last
daemon drains the rest.

Under ``in_doubt=resend`` every row ends ``sent`` and the provider created each email exactly
once: a batch is rescued whole and replayed as the identical request under its recorded key,
never in parts, never as its members under their own keys; a row whose single send had an
unknown outcome goes again singly under its own key, never in a batch. Under ``in_doubt=hold`` nothing is
created twice, and no row the provider created exactly once is left ``in_doubt``.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import pytest

from tests.e2e.chaos import (
    DaemonProcess,
    Figures,
    Fleet,
    KillRun,
    insert_rows,
    resend_env,
    sql,
    status_counts,
    statuses,
    wait_until,
)
from tests.e2e.test_chaos import all_settled, counted, stop
from tests.provider_server import ProviderServer

ROWS = 200
KILLS = 3
PREFIX = "bc-"
BATCH_PATH = "/emails/batch"


class Trickle(threading.Thread):
    """Inserts ``rows`` rows, 1-5 at a time (each INSERT its own transaction), every 0.1-0.3 s."""

    def __init__(self, url: str, rows: int, rng: random.Random) -> None:
        super().__init__(name="trickle", daemon=True)
        self.url, self.rows, self.rng = url, rows, rng
        self.inserted = 0
        self.error: BaseException | None = None
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            while self.inserted < self.rows and not self.stopping.is_set():
                n = min(self.rng.randint(1, 5), self.rows - self.inserted)
                insert_rows(self.url, n, PREFIX, start=self.inserted + 1)
                self.inserted += n
                self.stopping.wait(self.rng.uniform(0.1, 0.3))
        except BaseException as exc:  # reported by the test
            self.error = exc


def batch_requests(server: ProviderServer) -> int:
    return len(server.sends(BATCH_PATH))


def kill_mid_request(url: str, fleet: Fleet, env: dict[str, str], server: ProviderServer,
                     rng: random.Random) -> KillRun:
    """``KILLS`` times: start a daemon, let it make 1-3 batch requests, kill -9 it within a second of
    the last (each request is held 1-1.5 s: mostly while it is open), and note its claims."""
    run = KillRun()
    for i in range(KILLS):
        daemon = fleet.start(env, f"batch-chaos-{i}")
        daemon.wait_for_log(r"started worker=", 30)
        target = batch_requests(server) + rng.randint(1, 3)
        wait_until(lambda: batch_requests(server) >= target or not daemon.alive(), 30, interval=0.02,  # noqa: B023
                   what=lambda: f"{target} batch requests:\n{daemon.log_tail()}")  # noqa: B023  # fmt: skip
        time.sleep(rng.uniform(0, 1.0))
        run.kill(url, daemon)
    return run


def carriers(server: ProviderServer, key: str) -> list[tuple[str, str | None, int | None]]:
    """The requests that carried the email of ``key``: path, Idempotency-Key, status (None: dropped)."""
    return [(r.path, r.headers.get("idempotency-key"), r.status) for r in server.sends()
            if f'"{key}"'.encode() in r.body]


def drained(url: str, trickle: Trickle, final: DaemonProcess) -> Callable[[], bool]:
    def check() -> bool:
        assert final.alive(), f"the last daemon exited:\n{final.log_tail()}"
        return not trickle.is_alive() and all_settled(url, ROWS)

    return check


@pytest.mark.parametrize("in_doubt", ["resend", "hold"])
def test_batches_of_trickling_rows_under_500s_and_kills_are_created_once_by_the_provider(
        db_url: str, fleet: Fleet, figures: Figures, in_doubt: str) -> None:
    fleet.deadline(90)
    seed = random.randrange(1 << 30)
    figures("seed", seed)
    rng = random.Random(seed)
    server = ProviderServer(seed=seed).start()
    accept_500 = server.add_fault("accept_500", delay=1.5, probability=0.33, paths=(BATCH_PATH,))
    server.add_fault("slow", delay=1.0, paths=(BATCH_PATH,))  # every batch request the first fault spares
    single_500 = server.add_fault("accept_500", probability=0.33, paths=("/emails",))
    trickle = Trickle(db_url, ROWS, random.Random(seed + 1))
    try:
        env = resend_env(
            db_url, server.base_url,
            OUTBOX_MAILER_TRANSPORTS__RESEND__RATE_PER_SECOND="100",
            OUTBOX_MAILER_TRANSPORTS__RESEND__BURST="10",
            OUTBOX_MAILER_TRANSPORTS__RESEND__MAX_PARALLEL="2",
            OUTBOX_MAILER_TRANSPORTS__RESEND__TIMEOUT_SECONDS="2.5",
            OUTBOX_MAILER_IN_DOUBT=in_doubt,
            OUTBOX_MAILER_RESCUE_AFTER_SECONDS="6",  # a send starts only while claim age + 2.5 s + 1 s is under it
            OUTBOX_MAILER_CONCURRENCY="50",  # a batch carries what the daemon holds: up to 50 rows
        )
        started = time.monotonic()
        trickle.start()
        run = kill_mid_request(db_url, fleet, env, server, rng)
        final = fleet.start(env, "batch-chaos-final")
        wait_until(drained(db_url, trickle, final), 60, interval=0.2,
                   what=lambda: f"every row settled; now {status_counts(db_url)}, {trickle.inserted} inserted")
        elapsed = time.monotonic() - started
        assert stop(final) == 0, final.log_tail()
        assert trickle.error is None, f"the inserter failed: {trickle.error!r}"

        rows = statuses(db_url)
        created = dict(server.accepted_by_header)  # creations only: a repeat absorbed by its key counts nothing
        batches, resent, largest = sql(db_url, "SELECT count(*), count(*) FILTER (WHERE sends > 1), "
                                               "max(cardinality(member_ids)) FROM email_batches")[0]  # fmt: skip
        in_doubt_created_once = sorted(k for k, s in rows.items() if s == "in_doubt" and created.get(k) == 1)
        created_twice = {k: n for k, n in created.items() if n > 1}
        figures("in_flight_per_kill", [len(keys) for keys in run.in_flight])
        figures("rows_left_at_each_kill", run.left)
        figures("drain_seconds", round(elapsed, 1))
        figures("batch_requests", batch_requests(server))
        figures("single_requests", len(server.sends("/emails")))
        figures("batches_recorded_resent_largest", (int(batches), int(resent), int(largest or 0)))
        figures("answered_500_after_accepting", {"batch": accept_500.hits, "single": single_500.hits})
        figures("repeats_absorbed_by_key", server.replays)
        figures("concurrent_key_409", server.concurrent)
        figures("statuses", status_counts(db_url))
        figures("keys_created_twice", len(created_twice))
        figures("in_doubt_created_once", len(in_doubt_created_once))
        figures("attempt_outcomes", counted(sql(db_url, "SELECT outcome, count(*) FROM email_delivery_attempts "
                                                        "GROUP BY 1")))  # fmt: skip

        keys = {f"{PREFIX}{g}" for g in range(1, ROWS + 1)}
        assert set(rows) == keys
        assert accept_500.hits > 0 and int(resent) > 0, "no batch was answered 500 and resent: the faults did not bite"
        assert int(largest) > 1, "no batch of several rows"
        assert run.left[-1] > 0, "everything had settled before the last kill"
        assert not created_twice, "emails the provider created more than once, and their requests: " + "; ".join(
            f"{key}: {carriers(server, key)}" for key in sorted(created_twice)[:10])
        assert server.conflicts == 0, "a repeat under a key carried another payload"
        assert not in_doubt_created_once, f"in_doubt, yet the provider created them once: {in_doubt_created_once[:20]}"
        if in_doubt == "resend":
            assert status_counts(db_url) == {"sent": ROWS}
            assert created == dict.fromkeys(keys, 1), "the provider created each email exactly once"
        else:
            assert set(rows.values()) <= {"sent", "in_doubt"}
            sent = {k for k, s in rows.items() if s == "sent"}
            assert all(created.get(k) == 1 for k in sent), "every row sent was created by the provider once"
    finally:
        trickle.stopping.set()
        trickle.join(10)
        server.stop()
