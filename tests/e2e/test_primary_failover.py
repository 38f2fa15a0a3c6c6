"""A primary failover under a running drain (issue 16, item 1).

Two throwaway clusters: a primary and a synchronous streaming standby (tests/standby.py:
``pg_basebackup -R``, ``synchronous_standby_names``, ``sync_state = 'sync'``). The installed
daemon gets one DSN naming both hosts with ``target_session_attrs=read-write`` and drains
rows through a slowish SMTP sink (every DATA reply 0.1 s late). Mid-drain the primary is
stopped with ``pg_ctl stop -m immediate`` (a crash: backends killed, no shutdown checkpoint),
the outage lasts 4.6 s plus a random 0-2 s (a failover manager noticing), then the standby is promoted
(``pg_ctl promote -w``).

Asserted: the daemon never exits and reconnects to the promoted standby by itself; every row
committed before the failover is on the new primary (synchronous replication) and ends
``sent``; every key reaches the SMTP sink at least once; a key is received more than once only
if its row was in flight at the stop (``sending`` on the standby, whose state is frozen from the
stop until the promotion), at most once more per such row, so the repeats are bounded by the rows
a daemon holds: ``2 * OUTBOX_MAILER_CONCURRENCY`` (inflight.py: at most ``concurrency`` rows
sending plus as many outcomes waiting to be written; a claim takes at most
``min(batch_size, room)`` rows, so the batch size does not widen it).

Measured (printed, and in the "chaos figures" summary): promotion -> next send of a row that was
still pending (the daemon has claimed again, on the new primary) and promotion -> first row
newly recorded ``sent`` there. No timed assertion beyond generous timeouts. docs/production-
postgres.md quotes the figures.

The ``standby-first`` case lists the standby's host first: before the failover the daemon must
have picked the read-write host (its sessions are on the primary, none on the standby).

The ``old-primary-unresponsive`` case is the first one again, except that after the crash the old
primary's port accepts TCP and never answers (a machine gone whose packets are dropped, rather than
a server that refuses). asyncpg's connect timeout covers the whole host list, so the daemon
connects host by host (store/connection.py, connect_each_host), each with the whole timeout, as
libpq's connect_timeout does; and it holds a claimed batch before awaiting anything else, so its
own rescuer never takes it for dead while a LISTEN connection tries the dead host.
"""

from __future__ import annotations

import contextlib
import random
import socket
import time
from collections.abc import Iterator

import pytest

from outbox_mailer.devtools.pgcluster import TemporaryPostgres
from tests.e2e.chaos import (
    KEY_HEADER,
    Figures,
    Fleet,
    daemon_env,
    insert_rows,
    scalar,
    sent_count,
    sql,
    status_counts,
    wait_until,
)
from tests.smtp_server import SmtpTestServer
from tests.standby import SYNC_PRIMARY_SETTINGS, StreamingStandby, stop_immediate

TOTAL = 300
CONCURRENCY = 16  # OUTBOX_MAILER_CONCURRENCY, as in chaos.FAST_SETTINGS
DUPLICATE_BOUND = 2 * CONCURRENCY  # rows one daemon can hold (inflight.py)
SENT_BEFORE_STOP = 60
DATA_DELAY_SECONDS = 0.1  # 8 SMTP connections -> about 80 messages/s: the drain is still running at the stop
# From the crash to the promotion: longer than the rescue delay (4.5 s in FAST_SETTINGS), so the
# rows in flight have claims older than it when the daemon comes back, and long enough for the
# reconnect backoff to reach its 2 s cap, as in a real failover (which takes longer still); plus a
# random share of that cap, so that the promotion lands anywhere in the retry cycle (the backoff
# schedule itself is fixed: with a fixed outage every run would measure the same phase).
OUTAGE_SECONDS = 4.6
RETRY_CAP_SECONDS = 2.0  # sessions.RECONNECT_MAX_SECONDS
NEXT_SEND_TIMEOUT = 30  # generous: the reconnect backoff tops out at 2 s (sessions.py)
# The unresponsive case: the daemon's connect timeout (10 s, store/claims.py) spent on the dead host,
# + the backoff cap + a margin (5.6 s measured).
UNRESPONSIVE_NEXT_SEND_TIMEOUT = 18

def multi_host_dsn(first: int, second: int) -> str:
    return (f"postgresql://postgres@127.0.0.1:{first},127.0.0.1:{second}/postgres"
            "?target_session_attrs=read-write")


def daemon_sessions(url: str) -> int:
    return int(scalar(url, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'outbox-mailer'"))


def keys_with_status(url: str, status: str) -> set[str]:
    return {key for (key,) in sql(url, f"SELECT dedupe_key FROM email_deliveries WHERE status = '{status}'")}


def all_sent(url: str, total: int) -> bool:
    return status_counts(url) == {"sent": total}


@contextlib.contextmanager
def unanswered_port(port: int, enabled: bool) -> Iterator[None]:
    """While inside, ``port`` completes TCP handshakes (the kernel's backlog) and never answers: a
    server that stopped responding, as a crashed machine whose packets are dropped looks to a client."""
    if not enabled:
        yield
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as hole:
        hole.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        hole.bind(("127.0.0.1", port))
        hole.listen(512)
        yield


@pytest.mark.parametrize(("order", "unresponsive"), [
    pytest.param("primary-first", False, id="primary-first"),
    pytest.param("standby-first", False, id="standby-first"),
    # the old primary's address does not answer at all after the crash (instead of refusing)
    pytest.param("primary-first", True, id="old-primary-unresponsive"),
])  # fmt: skip
def test_primary_crash_and_promotion_mid_drain_loses_nothing(
    order: str, unresponsive: bool, smtp_server: SmtpTestServer, fleet: Fleet, figures: Figures
) -> None:
    fleet.deadline(120)
    next_send_timeout = UNRESPONSIVE_NEXT_SEND_TIMEOUT if unresponsive else NEXT_SEND_TIMEOUT
    with TemporaryPostgres(extra_settings=SYNC_PRIMARY_SETTINGS) as primary, StreamingStandby(primary) as standby, \
            contextlib.ExitStack() as later:
        assert standby.replication_state() == ("streaming", "sync")
        ports = (primary.port, standby.port) if order == "primary-first" else (standby.port, primary.port)
        dsn = multi_host_dsn(*ports)
        env = daemon_env(dsn, smtp_server.port, OUTBOX_MAILER_CONCURRENCY=str(CONCURRENCY))
        migrated = fleet.cli(env, "migrate")
        assert migrated.returncode == 0, migrated.stderr
        keys = set(insert_rows(primary.url, TOTAL))  # each INSERT's commit waited for the standby
        smtp_server.delay("DATA", DATA_DELAY_SECONDS)

        daemon = fleet.start(env, f"failover-{order}")
        wait_until(lambda: sent_count(primary.url) >= SENT_BEFORE_STOP, 30,
                   what=lambda: f"{SENT_BEFORE_STOP} rows sent before the stop:\n{daemon.log_tail()}")
        on_primary, on_standby = daemon_sessions(primary.url), daemon_sessions(standby.url)
        assert on_primary >= 1 and on_standby == 0, (
            f"the daemon is not on the read-write host only: {on_primary} sessions on the primary, "
            f"{on_standby} on the standby (DSN {dsn})")

        stop_immediate(primary)
        stopped_at = time.monotonic()
        later.enter_context(unanswered_port(primary.port, unresponsive))
        # The standby's state is frozen from here until the promotion: what the primary had committed.
        committed = int(scalar(standby.url, "SELECT count(*) FROM email_deliveries"))
        in_flight = keys_with_status(standby.url, "sending")
        pending = keys_with_status(standby.url, "pending")
        sent_at_stop = sent_count(standby.url)
        assert committed == TOTAL, f"rows committed on the primary missing on the synchronous standby: {committed}"
        assert len(in_flight) <= DUPLICATE_BOUND, in_flight
        assert pending, "the drain had finished before the stop"

        outage = OUTAGE_SECONDS + random.uniform(0, RETRY_CAP_SECONDS)  # printed as outage_seconds
        while time.monotonic() - stopped_at < outage:
            assert daemon.alive(), f"the daemon exited during the outage:\n{daemon.log_tail()}"
            time.sleep(0.05)
        assert daemon.alive(), f"the daemon exited during the outage:\n{daemon.log_tail()}"
        promoted_at = time.monotonic()
        promote_seconds = standby.promote()

        # promotion -> next send: the first message at the sink for a row still pending at the stop
        # (claimed again, so on the new primary); and -> the first row newly recorded 'sent' there.
        next_send = first_sent_row = None
        while next_send is None or first_sent_row is None:
            now = time.monotonic()
            if now - promoted_at > next_send_timeout:
                pytest.fail(f"no send {next_send_timeout} s after the promotion:\n{daemon.log_tail()}")
            if next_send is None and pending & set(smtp_server.received_by_header(KEY_HEADER)):
                next_send = now - promoted_at
            if first_sent_row is None and sent_count(standby.url) > sent_at_stop:
                first_sent_row = time.monotonic() - promoted_at
            time.sleep(0.01)
        assert daemon.alive(), f"the daemon exited after the promotion:\n{daemon.log_tail()}"

        wait_until(lambda: all_sent(standby.url, TOTAL), 60, interval=0.2,
                   what=lambda: f"every row sent on the new primary; now {status_counts(standby.url)}")
        assert daemon.alive(), f"the daemon exited:\n{daemon.log_tail()}"
        assert daemon_sessions(standby.url) >= 1
        daemon.terminate()
        assert daemon.wait(20) == 0, daemon.log_tail()

        log = daemon.log()
        received = smtp_server.received_by_header(KEY_HEADER)
        repeats = {key: n - 1 for key, n in received.items() if n > 1}
        figures("in_flight_at_stop", len(in_flight))
        figures("sent_before_stop", sent_at_stop)
        figures("outage_seconds", round(promoted_at - stopped_at, 2))
        figures("pg_ctl_promote_seconds", round(promote_seconds, 2))
        figures("promotion_to_next_send_seconds", round(next_send, 2))
        figures("promotion_to_first_sent_row_seconds", round(first_sent_row, 2))
        figures("keys_received_twice", len(repeats))
        figures("reconnect_retries_logged", log.count("retrying in"))

        assert status_counts(standby.url) == {"sent": TOTAL}
        assert set(received) == keys, f"never received: {sorted(keys - set(received))[:10]}"
        assert set(repeats) <= in_flight, f"repeated but not in flight at the stop: {set(repeats) - in_flight}"
        assert all(n == 1 for n in repeats.values()), repeats
        assert len(repeats) <= DUPLICATE_BOUND
        assert "database connection re-established" in log, log[-3000:]
