"""kill -9, then a restart on the same host with default timeouts (issue 16, item 4): the killed
process's claims are settled within seconds, not after the rescue delay (75 s here: the default
SMTP send timeout + 15 s). The restarted daemon keeps the killed one's worker name, as the
template unit's %H:%i does. Measured: from the restart to the last of the killed process's rows
leaving 'sending'."""

from __future__ import annotations

import time

from tests.e2e.chaos import (
    FAST_SETTINGS,
    KEY_HEADER,
    Figures,
    Fleet,
    daemon_env,
    insert_rows,
    sent_count,
    sql,
    wait_until,
)
from tests.smtp_server import SmtpTestServer

DEFAULT_TIMEOUTS = [name for name in FAST_SETTINGS if "TIMEOUT" in name or "RESCUE" in name]


def sending(url: str) -> set[str]:
    return {key for (key,) in sql(url, "SELECT dedupe_key FROM email_deliveries WHERE status = 'sending'")}


def test_kill9_then_restart_settles_the_killed_claims_within_seconds(
    db_url: str, smtp_server: SmtpTestServer, fleet: Fleet, figures: Figures
) -> None:
    smtp_server.delay("DATA", 0.2)
    env = daemon_env(db_url, smtp_server.port)
    for name in DEFAULT_TIMEOUTS:
        env.pop(name)
    total = 400
    insert_rows(db_url, total)
    first = fleet.start(env, "mailer")
    wait_until(lambda: sent_count(db_url) >= 40, 60, what="40 rows sent")
    first.kill9()
    killed = sending(db_url)
    assert killed, "nothing was in flight at the kill"
    restarted_at = time.monotonic()
    second = fleet.start(env, "mailer")
    settle = wait_until(lambda: not (sending(db_url) & killed), 60, interval=0.05,
                        what=lambda: f"the killed claims settled; still sending {sorted(sending(db_url) & killed)}")
    figures("in_flight_at_kill", len(killed))
    figures("restart_to_killed_claims_settled_seconds", round(time.monotonic() - restarted_at, 2))
    assert settle < 20, "the killed process's claims waited for the rescue delay"
    assert "their claims are rescued without waiting for the rescue delay" in second.log()
    wait_until(lambda: sent_count(db_url) == total, 120, interval=0.5, what="every row sent")
    received = smtp_server.received_by_header(KEY_HEADER)
    twice = {key for key, n in received.items() if n > 1}
    figures("keys_received_twice", len(twice))
    assert len(received) == total
    assert twice <= killed and max(received.values()) <= 2
