"""Three daemon processes on one database share one transport's RATE_PER_SECOND (quotas.py).

Before schema 11 each daemon had its own token bucket: three daemons limited to 20/s sent about
60/s. Now the measured aggregate over 10 s stays within 20/s plus the burst, and it still uses
most of the limit (the daemons do not starve one another).
"""

from __future__ import annotations

import time

import pytest

from tests.e2e.chaos import Figures, Fleet, daemon_env, insert_rows, sql, status_counts, wait_until
from tests.provider_server import ProviderServer
from tests.smtp_server import free_port

RATE, BURST, WINDOW, DAEMONS = 20.0, 2, 10.0, 3


@pytest.mark.alone  # a rate or timing bound: no other test meanwhile (tests/conftest.py)
def test_three_daemons_limited_to_20_per_second_send_at_most_20_per_second_plus_the_burst(
        db_url: str, fleet: Fleet, figures: Figures) -> None:
    fleet.deadline(120)
    server = ProviderServer().start()
    try:
        rows = int(RATE * (WINDOW + 4))
        env = daemon_env(
            db_url, free_port(),  # SMTP configured, unused
            OUTBOX_MAILER_TRANSPORTS__RESEND__KIND="resend",
            OUTBOX_MAILER_TRANSPORTS__RESEND__API_KEY="test",
            OUTBOX_MAILER_TRANSPORTS__RESEND__BASE_URL=server.base_url,
            OUTBOX_MAILER_TRANSPORTS__RESEND__BATCH="false",  # one request per email
            OUTBOX_MAILER_TRANSPORTS__RESEND__RATE_PER_SECOND=str(RATE),
            OUTBOX_MAILER_TRANSPORTS__RESEND__BURST=str(BURST),
            OUTBOX_MAILER_TRANSPORTS__RESEND__TIMEOUT_SECONDS="2",
            OUTBOX_MAILER_DEFAULT_TRANSPORT="resend",
            OUTBOX_MAILER_RESCUE_AFTER_SECONDS="30",  # rows may wait at the shared limit a while
            OUTBOX_MAILER_CONCURRENCY="8",
        )
        daemons = [fleet.start(env, f"rate-{i}") for i in range(DAEMONS)]
        for d in daemons:
            d.wait_for_log("started worker", 30)
        insert_rows(db_url, rows, prefix="rate-")
        wait_until(lambda: server.accepted_times, 30, what="the first email accepted")
        start = server.accepted_times[0]
        time.sleep(max(0.0, start + WINDOW + 0.5 - time.monotonic()))
        counted = server.accepted_between(start, start + WINDOW)
        figures("aggregate_rate_per_second", round(counted / WINDOW, 2))
        assert counted <= RATE * WINDOW + BURST, f"{counted} requests in {WINDOW:g} s from {DAEMONS} daemons"
        assert counted >= 0.9 * RATE * WINDOW, f"only {counted} requests in {WINDOW:g} s: the limit goes unused"
        wait_until(lambda: status_counts(db_url) == {"sent": rows}, 60,
                   what=lambda: f"every row sent; now {status_counts(db_url)}")
        assert all(n == 1 for n in server.accepted.values()) and len(server.accepted) == rows
        for d in daemons:
            d.terminate()
        for d in daemons:
            assert d.wait(20) == 0, d.log_tail()
        per_daemon = sql(db_url, "SELECT count(*) FROM email_delivery_attempts WHERE outcome = 'sent' "
                                 "GROUP BY worker ORDER BY 1")
        figures("emails_per_daemon", [int(n) for [n] in per_daemon])
        assert len(per_daemon) == DAEMONS, "every daemon took a share"
    finally:
        server.stop()
