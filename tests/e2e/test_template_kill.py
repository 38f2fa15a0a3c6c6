"""kill -9 while template rows are on the wire: the next daemon renders the version pinned at INSERT.

Template version 1 is added with the installed CLI and rows name the template; the SMTP server holds its
reply to each body, and the daemon is killed with SIGKILL while the bodies are out. Version 2 is then
added, and a second daemon rescues the claims and sends them again: every message a row sent, before and
after the kill, is the same bytes (less the attempt's own Date line), and they are version 1's.
"""

from __future__ import annotations

import email
import email.policy
import re
from pathlib import Path

from tests.e2e.chaos import KEY_HEADER, Fleet, daemon_env, sql, status_counts, wait_until
from tests.smtp_server import SmtpTestServer

ROWS = 6


def undated(data: bytes) -> bytes:
    return re.sub(rb"(?m)^Date: [^\r]*\r\n", b"", data)


def key_of(data: bytes) -> str:
    return str(email.message_from_bytes(data, policy=email.policy.default)[KEY_HEADER])


def add_version(fleet: Fleet, env: dict[str, str], directory: Path, subject: str, text: str) -> None:
    body = directory / f"{len(list(directory.glob('*.txt')))}.txt"
    body.write_text(text)
    done = fleet.cli(env, "template", "add", "receipt", "--subject", subject, "--text", str(body))
    assert done.returncode == 0, done.stderr


def test_kill9_mid_send_resends_the_template_version_pinned_at_insert_byte_for_byte(
        db_url: str, smtp_server: SmtpTestServer, fleet: Fleet, tmp_path: Path) -> None:
    fleet.deadline(120)
    env = daemon_env(db_url, smtp_server.port, OUTBOX_MAILER_DEFAULT_FROM="shop@example.com")
    add_version(fleet, env, tmp_path, "Receipt {{ n }}", "Version one, order {{ n }}.\n")
    sql(db_url, f"""
        INSERT INTO email_deliveries (dedupe_key, to_addresses, template, template_data, headers)
        SELECT 'tk-' || g, ARRAY['rcpt-' || g || '@example.com'], 'receipt', jsonb_build_object('n', g),
               jsonb_build_object('{KEY_HEADER}', 'tk-' || g)
        FROM generate_series(1, {ROWS}) AS g
    """)  # fmt: skip
    assert sql(db_url, "SELECT DISTINCT template_version FROM email_deliveries") == [["1"]]

    smtp_server.delay("DATA", 30.0)  # every body is read; its reply never comes before the kill
    first = fleet.start(env, "template-killed")
    wait_until(lambda: len(smtp_server.messages) >= 2, 30, what=lambda: first.log_tail())
    first.kill9()
    on_the_wire = {key_of(m.data) for m in smtp_server.messages}

    add_version(fleet, env, tmp_path, "Receipt {{ n }} (new)", "Version two, order {{ n }}.\n")
    smtp_server.clear_faults()
    rescuer = fleet.start(env, "template-rescuer")
    wait_until(lambda: status_counts(db_url) == {"sent": ROWS}, 60,
               what=lambda: f"every row sent; now {status_counts(db_url)}\n{rescuer.log_tail()}")
    rescuer.terminate()
    assert rescuer.wait(20) == 0, rescuer.log_tail()

    sent: dict[str, set[bytes]] = {}
    for message in smtp_server.messages:
        sent.setdefault(key_of(message.data), set()).add(undated(message.data))
    assert set(sent) == {f"tk-{g}" for g in range(1, ROWS + 1)}
    resent = [key for key in on_the_wire if smtp_server.received_by_header(KEY_HEADER)[key] >= 2]
    assert resent, "a row whose body was on the wire at the kill was sent again"
    for key, bodies in sent.items():
        assert len(bodies) == 1, f"{key} was sent as {len(bodies)} different messages"
        parsed = email.message_from_bytes(next(iter(bodies)), policy=email.policy.default)
        assert parsed["Subject"] == f"Receipt {key.removeprefix('tk-')}", key
        assert b"Version one" in next(iter(bodies)) and b"Version two" not in next(iter(bodies)), key
