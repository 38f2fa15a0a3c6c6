"""Failover under kill -9 (issue 30, item 4): a row on its way through the fallback when its daemon
died is resent, if at all, through the fallback, never through the primary.

Real processes (``outbox-mailer run`` from the built wheel), a real PostgreSQL, two SMTP servers
(aiosmtpd in this process, on 127.0.0.1): the primary refuses connections while daemons are killed
during the drain, so every row goes out through the fallback; the primary is back for the last
daemon, which rescues the dead daemons' claims and sends the rest. Every row carries its dedupe key
in ``X-Test-Key``, so each server counts what it received per key.
"""

from __future__ import annotations

import random

from tests.e2e.chaos import (
    KEY_HEADER,
    Figures,
    Fleet,
    daemon_env,
    insert_rows,
    kill_repeatedly,
    sql,
    status_counts,
    wait_until,
)
from tests.e2e.test_chaos import all_settled, counted, stop
from tests.smtp_server import SmtpTestServer, running_smtp_server

# The four kill cycles consume 550-800 rows together as measured (received_by_backup): each asks for up
# to 100 more, and more go while the kill is timed and in flight. With 600 rows the last cycle could ask
# for rows that were no longer there to send (its wait timed out); rows must be left for the final daemon.
ROWS = 2400
KILLS = 4


def fallback_settings(port: int) -> dict[str, str]:
    """The primary (OUTBOX_MAILER_SMTP__) falls back to "backup", a second SMTP server on ``port``."""
    backup = {"KIND": "smtp", "HOST": "127.0.0.1", "PORT": str(port), "TLS": "none", "CONNECT_TIMEOUT_SECONDS": "1",
              "COMMAND_TIMEOUT_SECONDS": "1", "DATA_TIMEOUT_SECONDS": "2", "SEND_TIMEOUT_SECONDS": "3",
              "POOL_SIZE": "8"}
    return {"OUTBOX_MAILER_SMTP__FALLBACK": "backup",
            **{f"OUTBOX_MAILER_TRANSPORTS__BACKUP__{name}": value for name, value in backup.items()}}


def test_kill9_during_failover_no_key_reaches_both_servers(
    db_url: str, smtp_server: SmtpTestServer, fleet: Fleet, figures: Figures
) -> None:
    fleet.deadline(60)
    seed = random.randrange(1 << 30)
    figures("seed", seed)
    keys = insert_rows(db_url, ROWS, "fo-")
    with running_smtp_server() as backup:
        env = daemon_env(db_url, smtp_server.port, OUTBOX_MAILER_IN_DOUBT="resend", **fallback_settings(backup.port))
        smtp_server.stop()  # the primary refuses connections: rows fail over to the backup
        run = kill_repeatedly(db_url, fleet, env, random.Random(seed), KILLS, max_sent_between=100, name="fo-kill")
        smtp_server.start()  # back for the last daemon, its rescue of the dead claims and the rest of the rows
        final = fleet.start(env, "fo-final")
        final.wait_for_log(r"started worker=", 30)  # a SIGTERM before its handler is set would end it with -15
        wait_until(lambda: all_settled(db_url, ROWS), 45, interval=0.2,
                   what=lambda: f"every row settled; now {status_counts(db_url)}")  # fmt: skip
        assert stop(final) == 0, final.log_tail()
        by_backup = backup.received_by_header(KEY_HEADER)
    by_primary = smtp_server.received_by_header(KEY_HEADER)
    rescued = counted(sql(db_url, "SELECT transport, count(*) FROM email_delivery_attempts "
                                  "WHERE worker LIKE 'rescuer %' GROUP BY 1"))  # fmt: skip
    figures("in_flight_at_kills", [len(k) for k in run.in_flight])
    figures("rescued_attempts_by_transport", rescued)
    figures("received_by_primary", len(by_primary))
    figures("received_by_backup", len(by_backup))
    figures("keys_received_twice_by_backup", sum(1 for n in by_backup.values() if n > 1))

    assert status_counts(db_url) == {"sent": ROWS}
    assert set(by_primary) | set(by_backup) == set(keys)
    both = set(by_primary) & set(by_backup)
    assert not both, f"keys received by both servers: {sorted(both)[:20]}"
    assert run.left[-1] > 0, "the backlog drained before the last kill: the kills did not hit a running drain"
    assert run.in_flight_total > 0 and rescued.get("backup"), "no claim on its way through the fallback was rescued"
    assert by_primary, "the primary took no row once it was back"
    duplicated = {k for k, n in by_backup.items() if n > 1}
    assert duplicated <= run.in_flight_keys, f"duplicates outside the crash window: {duplicated - run.in_flight_keys}"
