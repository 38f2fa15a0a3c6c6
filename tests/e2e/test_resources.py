"""Bounded resources with a large backlog (issue 3, item 7), measured on the installed daemon.

One daemon runs ~12 s against a 2,000-row backlog (meanwhile a database of its own gets the big
one), and the same time against a 200,000-row backlog: its resident memory stays under a fixed
bound and does not grow with the backlog (claim batches, not the table, live in memory); its
PostgreSQL connections (``application_name = 'outbox-mailer'``) stay within three; its SMTP
connections stay within ``OUTBOX_MAILER_SMTP__POOL_SIZE``. SIGTERM then stops it with exit code 0.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from tests.conftest import cloned_database
from tests.e2e.chaos import Figures, Fleet, daemon_env, insert_rows, scalar, sent_count_query
from tests.smtp_server import SmtpTestServer

POOL_SIZE = 8
RUN_SECONDS = 12.0
RSS_LIMIT_MB = 200.0
PG_CONNECTIONS_PER_DAEMON = 3


@dataclass
class Measured:
    rss_mb: list[float] = field(default_factory=list)
    pg_connections: list[int] = field(default_factory=list)
    sent: int = 0
    exit_code: int | None = None

    @property
    def peak_rss_mb(self) -> float:
        return max(self.rss_mb)


def run_and_measure(url: str, server: SmtpTestServer, fleet: Fleet, name: str) -> Measured:
    env = daemon_env(url, server.port, OUTBOX_MAILER_SMTP__POOL_SIZE=str(POOL_SIZE))
    sent_before = int(scalar(url, sent_count_query))
    daemon = fleet.start(env, name)
    daemon.wait_for_log(r"started worker=", 30)
    measured = Measured()
    until = time.monotonic() + RUN_SECONDS
    while time.monotonic() < until:
        assert daemon.alive(), f"the daemon exited:\n{daemon.log_tail()}"
        rss = daemon.rss_kib()
        if rss is not None:
            measured.rss_mb.append(rss / 1024)
        measured.pg_connections.append(int(scalar(
            url, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'outbox-mailer' "
                 "AND datname = current_database()")))  # fmt: skip
        time.sleep(0.25)
    daemon.terminate()
    measured.exit_code = daemon.wait(30)
    measured.sent = int(scalar(url, sent_count_query)) - sent_before
    return measured


def timed_insert(url: str, n: int, prefix: str) -> float:
    started = time.monotonic()
    insert_rows(url, n, prefix)
    return time.monotonic() - started


def test_memory_and_connections_stay_bounded_with_a_200000_row_backlog(
    db_url: str, pg_server: str, template_db: str, smtp_server: SmtpTestServer,
    fleet: Fleet, figures: Figures,
) -> None:
    fleet.deadline(150)
    insert_rows(db_url, 2_000, "small-")
    # the big backlog goes into a database of its own while the small run goes on (its ~18 s, not after it)
    with cloned_database(pg_server, template_db) as big_url, ThreadPoolExecutor(1) as pool:
        filling = pool.submit(timed_insert, big_url, 200_000, "big-")
        small = run_and_measure(db_url, smtp_server, fleet, "small-backlog")
        figures("insert_200000_rows_seconds", round(filling.result(), 1))
        big = run_and_measure(big_url, smtp_server, fleet, "big-backlog")

    third = len(big.rss_mb) // 3
    figures("rss_peak_mb_2000_backlog", round(small.peak_rss_mb, 1))
    figures("rss_peak_mb_200000_backlog", round(big.peak_rss_mb, 1))
    figures("rss_mb_200000_backlog_after_first_third_and_at_end",
            (round(big.rss_mb[third], 1), round(big.rss_mb[-1], 1)))  # fmt: skip
    figures("sent_in_run_2000_backlog", small.sent)
    figures("sent_in_run_200000_backlog", big.sent)
    figures("max_pg_connections", max(small.pg_connections + big.pg_connections))
    figures("max_concurrent_smtp_connections", smtp_server.max_concurrent)

    assert small.exit_code == 0 and big.exit_code == 0, (small.exit_code, big.exit_code, fleet.tails())
    assert big.sent > 1000, "the daemon made no real progress through the backlog"
    assert big.peak_rss_mb < RSS_LIMIT_MB
    assert big.peak_rss_mb <= max(1.5 * small.peak_rss_mb, small.peak_rss_mb + 50)
    assert max(big.pg_connections + small.pg_connections) <= PG_CONNECTIONS_PER_DAEMON
    assert smtp_server.max_concurrent <= POOL_SIZE
