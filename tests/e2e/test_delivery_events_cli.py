"""Delivery events through the installed CLI: a bounce piped to ingest-dsn, a signed event posted to
`outbox-mailer webhooks`, and the next row to the bounced address failing with nothing sent."""

from __future__ import annotations

import email
import email.policy
import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Installed
from tests.e2e.test_cli import psql, status_json
from tests.integration.test_webhook_receiver import RESEND_SECRET, resend_event, svix_headers
from tests.smtp_server import SmtpTestServer, free_port

DSN = (Path(__file__).resolve().parents[1] / "fixtures" / "dsn" / "postfix_failed_headers.eml").read_text()
ORIGINAL_ID = "<3f2a9c0d8e7b41a6b5c4d3e2f1a09b8c@shop.example.com>"


def bounce_for(message_id: str, recipient: str) -> str:
    return DSN.replace(ORIGINAL_ID, message_id).replace("nobody@Example.NET", recipient)


def wait_status(installed: Installed, env: dict[str, str], key: str, timeout: float = 20) -> dict:  # type: ignore[type-arg]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = status_json(installed, env, key).get(key)
        if row and row["status"] not in ("pending", "sending"):
            return row
        time.sleep(0.2)
    raise AssertionError(f"{key} not final")


def test_a_piped_bounce_suppresses_and_the_next_row_fails_unsent(
        installed: Installed, cli_env: dict[str, str], db_url: str, cli_daemon: subprocess.Popen[str],
        smtp_server: SmtpTestServer) -> None:
    psql(db_url, "INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body) "
                 "VALUES ('first', ARRAY['Gone@Example.net'], 'hi', 'body')")
    assert wait_status(installed, cli_env, "first")["status"] == "sent"
    [sent] = smtp_server.accepted
    message_id = email.message_from_bytes(sent.data, policy=email.policy.default)["Message-ID"]
    assert status_json(installed, cli_env, "first")["first"]["message_id"] == message_id

    out = installed.cli("ingest-dsn", env=cli_env, input=bounce_for(message_id, "Gone@Example.net"))
    assert out.returncode == 0, out.stderr
    again = installed.cli("ingest-dsn", env=cli_env, input=bounce_for(message_id, "Gone@Example.net"))
    assert again.returncode == 0, "the same bounce twice: recorded once"
    [event] = [json.loads(line) for line in installed.cli("events", "first", "--json", env=cli_env).stdout.splitlines()]
    assert (event["provider"], event["kind"], event["bounce_class"]) == ("smtp", "bounced", "hard")
    assert status_json(installed, cli_env, "first")["first"]["delivery_event"] == "bounced"
    [s] = [json.loads(line) for line in installed.cli("suppressions", "--json", env=cli_env).stdout.splitlines()]
    assert (s["address"], s["reason"], s["source"]) == ("gone@example.net", "hard_bounce", "smtp")

    psql(db_url, "INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body) "
                 "VALUES ('second', ARRAY['gone@example.net'], 'hi', 'body')")
    second = wait_status(installed, cli_env, "second")
    assert second["status"] == "failed" and second["last_error"].startswith("suppressed: gone@example.net")
    assert len(smtp_server.accepted) == 1, "the suppressed row reached no server"

    assert installed.cli("unsuppress", "GONE@example.net", env=cli_env).returncode == 0
    assert installed.cli("unsuppress", "gone@example.net", env=cli_env).returncode == 1
    manual = installed.cli("suppress", "x@example.org", "--reason", "unsubscribe", "--expires-in", "7d", "--json",
                           env=cli_env)
    assert manual.returncode == 0 and json.loads(manual.stdout)["reason"] == "unsubscribe"
    assert installed.cli("suppress", "not an address", env=cli_env).returncode == 2


def test_ingest_dsn_ignores_what_is_not_a_bounce_and_asks_the_mta_to_retry_when_the_database_is_down(
        installed: Installed, cli_env: dict[str, str]) -> None:
    ignored = installed.cli("ingest-dsn", env=cli_env, input="From: a@example.com\nSubject: hello\n\nthanks!\n")
    assert ignored.returncode == 0
    down = {**cli_env, "OUTBOX_MAILER_DATABASE_URL": f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"}
    out = installed.cli("ingest-dsn", env=down, input=bounce_for("<a@b.example>", "x@example.net"))
    assert out.returncode == 75, out.stderr


@pytest.fixture
def webhooks(installed: Installed, cli_env: dict[str, str]) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen([str(installed.bin / "outbox-mailer"), "webhooks"], text=True,
                            env={**cli_env, "OUTBOX_MAILER_WEBHOOKS__ADDRESS": f"127.0.0.1:{port}",
                                 "OUTBOX_MAILER_WEBHOOKS__RESEND__SECRET": RESEND_SECRET},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.stdout else ""
        time.sleep(0.1)
    yield url
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0


def test_the_webhooks_command_records_a_signed_event_and_refuses_a_forged_one(
        installed: Installed, cli_env: dict[str, str], db_url: str, webhooks: str) -> None:
    psql(db_url, "INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body) "
                 "VALUES ('tagged', ARRAY['a@example.com'], 'hi', 'body')")
    body = resend_event("email.complained", "re_9", tags={"dedupe_key": "tagged"})
    assert httpx.post(webhooks + "/webhooks/resend", content=body, headers=svix_headers(body, "m1")).status_code == 200
    forged = body.replace(b"re_9", b"re_8")
    assert httpx.post(webhooks + "/webhooks/resend", content=forged, headers=svix_headers(body, "m2")).status_code == 401
    assert status_json(installed, cli_env, "tagged")["tagged"]["delivery_event"] == "complained"
    metrics = httpx.get(webhooks + "/metrics").text
    assert 'outbox_mailer_webhook_events_total{kind="complained",provider="resend"} 1.0' in metrics
    assert 'outbox_mailer_webhook_refused_requests_total{provider="resend",status="401"} 1.0' in metrics


def test_the_webhooks_command_refuses_to_start_without_an_address_or_a_provider(
        installed: Installed, cli_env: dict[str, str]) -> None:
    out = installed.cli("webhooks", env={**cli_env, "OUTBOX_MAILER_WEBHOOKS__RESEND__SECRET": RESEND_SECRET})
    assert out.returncode == 2 and "OUTBOX_MAILER_WEBHOOKS__ADDRESS" in out.stderr
    out = installed.cli("webhooks", env={**cli_env, "OUTBOX_MAILER_WEBHOOKS__ADDRESS": f"127.0.0.1:{free_port()}"})
    assert out.returncode == 2 and "secret" in out.stderr


def test_ingest_dsn_believes_a_bounce_about_a_shared_email_only_by_its_recipients_tag(
        installed: Installed, cli_env: dict[str, str], db_url: str) -> None:
    from datetime import UTC, datetime

    from outbox_mailer.delivery_events.bounce_tags import BounceAddress, day_of

    key = "a-bounce-tag-key-of-32-characters"
    tagged = {**cli_env, "OUTBOX_MAILER_BOUNCES__ADDRESS": "bounces@example.com", "OUTBOX_MAILER_BOUNCES__KEY": key}
    psql(db_url, "INSERT INTO email_deliveries (dedupe_key, to_addresses, cc_addresses, subject, text_body) "
                 "VALUES ('shared', ARRAY['a@example.net'], ARRAY['gone@example.net'], 'hi', 'body')")
    row_id = int(subprocess.run(["psql", "-X", "-tA", db_url, "-c", "SELECT id FROM email_deliveries"],
                                text=True, check=True, capture_output=True, timeout=60).stdout)
    tags, today = BounceAddress("bounces@example.com", [key.encode()]), day_of(datetime.now(UTC))
    dsn = bounce_for("<unknown@x.example>", "gone@example.net")  # no Message-ID of ours: the tag names the row
    wrong = installed.cli("ingest-dsn", "--recipient", tags.sender(row_id, 1, today), env=tagged, input=dsn)
    assert wrong.returncode == 0, wrong.stderr
    assert installed.cli("suppressions", "--json", env=cli_env).stdout == "", "the tag of a@ proves nothing about gone@"
    again = dsn.replace("Message-Id: <", "Message-Id: <again.", 1)
    out = installed.cli("ingest-dsn", env={**tagged, "ORIGINAL_RECIPIENT": tags.sender(row_id, 2, today)}, input=again)
    assert out.returncode == 0, out.stderr
    [s] = [json.loads(line) for line in installed.cli("suppressions", "--json", env=cli_env).stdout.splitlines()]
    assert (s["address"], s["source"]) == ("gone@example.net", "smtp")
    assert len(installed.cli("events", "shared", "--json", env=cli_env).stdout.splitlines()) == 2
