"""kill -9 through the Resend transport: every key accepted exactly once by the provider.

The installed daemon (``outbox-mailer run`` from the built wheel) sends through the Resend
transport to the fake provider (tests/provider_server.py), which keeps idempotency keys like
Resend and misbehaves on purpose: it accepts an email and then answers 500 or drops the
connection, sometimes holds a request past the client's timeout, sometimes answers 429. The
daemon is killed with SIGKILL at random moments, ten times, while the backlog drains, and
restarted each time; claims of the dead processes are rescued. With ``in_doubt=hold``, every
ambiguous outcome is still resent, because it falls inside Resend's key window; the provider
absorbs every repeat, so every key is accepted exactly once.
"""

from __future__ import annotations

import json
import random
import time

from tests.e2e.chaos import (
    Figures,
    Fleet,
    insert_rows,
    kill_repeatedly,
    resend_env,
    scalar,
    sql,
    status_counts,
    wait_until,
)
from tests.e2e.conftest import Installed, base_env
from tests.provider_server import KEY_HEADER, ProviderServer
from tests.smtp_server import SmtpTestServer

KILLS = 10
# CONCURRENCY counts requests and a Resend batch carries up to 100 rows: one daemon life sends a few
# hundred rows between kills, so the backlog must outlast ten of them
ROWS = 6000
TIME_LIMIT_SECONDS = 120


def settled(url: str, total: int) -> bool:
    counts = status_counts(url)
    return sum(counts.values()) == total and not counts.get("pending") and not counts.get("sending")


def test_kill9_ten_times_through_resend_every_key_accepted_exactly_once(
    db_url: str, fleet: Fleet, figures: Figures
) -> None:
    seed = random.randrange(1 << 30)
    figures("seed", seed)
    rng = random.Random(seed)
    fleet.deadline(TIME_LIMIT_SECONDS + 30)
    server = ProviderServer(seed=seed).start()
    server.record_requests = False
    server.add_fault("accept_500", probability=0.04)
    server.add_fault("accept_drop", probability=0.04)
    server.add_fault("slow", delay=3.5, probability=0.005)  # past the 2 s timeout: ambiguous, then 409 concurrent
    server.add_fault("reply", status=429, body={"name": "rate_limit_exceeded", "message": "Too many requests"},
                     headers={"Retry-After": "0.2"}, probability=0.01)
    try:
        keys = insert_rows(db_url, ROWS)
        env = resend_env(
            db_url, server.base_url,
            OUTBOX_MAILER_TRANSPORTS__RESEND__RATE_PER_SECOND="500",
            OUTBOX_MAILER_TRANSPORTS__RESEND__BURST="50",
            OUTBOX_MAILER_TRANSPORTS__RESEND__MAX_PARALLEL="16",
            OUTBOX_MAILER_TRANSPORTS__RESEND__TIMEOUT_SECONDS="2",
            OUTBOX_MAILER_IN_DOUBT="hold",
            OUTBOX_MAILER_SMTP__TLS="none",
            OUTBOX_MAILER_SMTP__DATA_TIMEOUT_SECONDS="2",
            OUTBOX_MAILER_SMTP__SEND_TIMEOUT_SECONDS="2",
            OUTBOX_MAILER_RESCUE_AFTER_SECONDS="4",
            OUTBOX_MAILER_RESCUE_INTERVAL_SECONDS="0.5",
            OUTBOX_MAILER_RETRY__BASE_SECONDS="0.05",
            OUTBOX_MAILER_RETRY__MAX_SECONDS="0.5",
            OUTBOX_MAILER_MAX_ATTEMPTS="50",
            OUTBOX_MAILER_POLL_INTERVAL_SECONDS="0.5",
            OUTBOX_MAILER_CONCURRENCY="16",
            OUTBOX_MAILER_DEFAULT_FROM="app@example.com",
        )
        started = time.monotonic()
        run = kill_repeatedly(db_url, fleet, env, rng, KILLS, max_sent_between=200, name="resend-kill")
        final = fleet.start(env, "resend-final")
        wait_until(lambda: settled(db_url, ROWS), TIME_LIMIT_SECONDS, interval=0.5,
                   what=lambda: f"every row settled; now {status_counts(db_url)}")  # fmt: skip
        elapsed = time.monotonic() - started
        final.terminate()
        assert final.wait(20) == 0, final.log_tail()

        outcomes = {o: int(n) for o, n in sql(db_url, "SELECT outcome, count(*) FROM email_delivery_attempts "
                                                      "GROUP BY 1")}  # fmt: skip
        figures("kills", KILLS)
        figures("in_flight_per_kill", [len(keys) for keys in run.in_flight])
        figures("rows_left_at_each_kill", run.left)
        figures("drain_seconds", round(elapsed, 1))
        figures("requests_answered", dict(sorted(server.answers.items())))
        figures("duplicate_requests_absorbed_by_key", server.replays)
        figures("concurrent_key_409", server.concurrent)
        figures("attempt_outcomes", outcomes)

        assert status_counts(db_url) == {"sent": ROWS}
        by_header = dict(server.accepted_by_header)
        assert set(by_header) == set(keys), f"never accepted: {sorted(set(keys) - set(by_header))[:20]}"
        twice = {key: n for key, n in by_header.items() if n != 1}
        assert not twice, f"keys accepted more than once by the provider: {list(twice.items())[:20]}"
        assert server.accepted == server.accepted_by_header  # the idempotency key is the dedupe key
        assert server.conflicts == 0, "a retry carried another payload under the same key"
        assert server.replays > 0, "no repeat reached the provider: the faults did not bite"
        assert outcomes.get("ambiguous", 0) > 0
        assert run.left[-1] > 0, "the backlog drained before the last kill"
        assert elapsed < TIME_LIMIT_SECONDS
        missing_id = int(scalar(db_url, "SELECT count(*) FROM email_deliveries WHERE provider_message_id IS NULL"))
        assert missing_id == 0
        assert KEY_HEADER  # every row carries its key in this header, counted by the server
    finally:
        server.stop()


def test_check_reports_every_transport_and_never_prints_api_keys(
    installed: Installed, db_url: str, smtp_server: SmtpTestServer, provider_server: ProviderServer
) -> None:
    env = base_env(
        OUTBOX_MAILER_DATABASE_URL=db_url, OUTBOX_MAILER_SMTP__HOST="127.0.0.1",
        OUTBOX_MAILER_SMTP__PORT=str(smtp_server.port), OUTBOX_MAILER_SMTP__TLS="none",
        OUTBOX_MAILER_TRANSPORTS__RESEND__KIND="resend", OUTBOX_MAILER_TRANSPORTS__RESEND__API_KEY="test",
        OUTBOX_MAILER_TRANSPORTS__RESEND__BASE_URL=provider_server.base_url,
        OUTBOX_MAILER_TRANSPORTS__MAILAPI__KIND="http", OUTBOX_MAILER_TRANSPORTS__MAILAPI__URL=provider_server.hook_url,
        OUTBOX_MAILER_TRANSPORTS__MAILAPI__SIGNING_SECRET="whsec-do-not-print",
        OUTBOX_MAILER_DEFAULT_TRANSPORT="resend",
    )  # fmt: skip
    ok = installed.cli("check", "--json", env=env)
    checks = {c["check"]: c for c in map(json.loads, ok.stdout.splitlines())}
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert checks["smtp"]["ok"] and checks["resend"]["ok"] and checks["mailapi"]["ok"]
    assert "credentials accepted" in checks["resend"]["detail"]
    assert checks["configuration"]["detail"]["default_transport"] == "resend"
    assert "whsec-do-not-print" not in ok.stdout + ok.stderr
    refused = installed.cli("check", env={**env, "OUTBOX_MAILER_TRANSPORTS__RESEND__API_KEY": "re_wrong_key"})
    assert refused.returncode == 3 and "[FAIL] resend" in refused.stdout and "credentials refused" in refused.stdout
    assert "re_wrong_key" not in refused.stdout + refused.stderr
