"""The installed CLI as a subprocess: the whole path, exit codes and --json."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from tests.e2e.conftest import Installed, base_env
from tests.smtp_server import SmtpTestServer, free_port


def psql(url: str, script: str) -> None:
    subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", url], input=script, text=True, check=True,
                   capture_output=True, timeout=60)


def status_json(installed: Installed, env: dict[str, str], *keys: str) -> dict[str, dict]:  # type: ignore[type-arg]
    out = installed.cli("status", *keys, "--json", env=env)
    return {d["dedupe_key"]: d for d in map(json.loads, out.stdout.splitlines())}


def test_rows_committed_with_psql_are_delivered_and_rolled_back_ones_never(
    installed: Installed, cli_env: dict[str, str], db_url: str, smtp_server: SmtpTestServer,
    cli_daemon: subprocess.Popen[str],
) -> None:
    values = ",\n".join(f"('order-{i}', ARRAY['c{i}@example.com'], 'Order {i}', 'Thanks')" for i in range(30))
    psql(db_url, f"BEGIN;\nINSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body) VALUES\n"
                 f"{values};\nCOMMIT;\n")
    psql(db_url, "BEGIN;\nINSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body) "
                 "VALUES ('rolled-back', ARRAY['x@example.com'], 'no', 'no');\nROLLBACK;\n")
    keys = [f"order-{i}" for i in range(30)]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rows = status_json(installed, cli_env, *keys)
        if len(rows) == 30 and all(r["status"] == "sent" for r in rows.values()):
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"not all sent: {rows}")
    assert rows["order-7"]["attempts"] == 1 and rows["order-7"]["sent_at"]
    assert sorted(m.rcpt_tos[0] for m in smtp_server.accepted) == sorted(f"c{i}@example.com" for i in range(30))
    missing = installed.cli("status", "rolled-back", env=cli_env)
    assert missing.returncode == 1
    assert missing.stderr.strip() == "outbox-mailer: no email with dedupe key 'rolled-back'"
    cli_daemon.send_signal(signal.SIGTERM)
    assert cli_daemon.wait(timeout=15) == 0
    assert all(b"x@example.com" not in m.data for m in smtp_server.messages)


def test_enqueue_from_flags_and_stdin_then_cancel_and_retry(installed: Installed, cli_env: dict[str, str]) -> None:
    flags = installed.cli("enqueue", "--key", "k-flags", "--to", "a@example.com", "--subject", "Hi", "--text",
                          "body", "--json", env=cli_env)
    assert flags.returncode == 0, flags.stderr
    assert json.loads(flags.stdout)["created"] is True
    doc = {"dedupe_key": "k-stdin", "to_addresses": "b@example.com", "subject": "Hé", "html_body": "<p>x</p>",
           "scheduled_at": "2099-01-01T00:00:00+00:00"}
    stdin = installed.cli("enqueue", "--stdin", "--json", env=cli_env, input=json.dumps(doc))
    assert stdin.returncode == 0, stdin.stderr
    again = installed.cli("enqueue", "--stdin", "--json", env=cli_env, input=json.dumps(doc))
    assert again.returncode == 0 and json.loads(again.stdout)["created"] is False
    rows = status_json(installed, cli_env, "k-flags", "k-stdin")
    assert rows["k-stdin"]["status"] == "pending" and rows["k-stdin"]["scheduled_at"].startswith("2099-01-01")
    assert installed.cli("cancel", "k-stdin", env=cli_env).returncode == 0
    second = installed.cli("cancel", "k-stdin", env=cli_env)
    assert second.returncode == 1 and "is cancelled" in second.stderr
    assert installed.cli("retry", "k-stdin", env=cli_env).returncode == 0
    assert status_json(installed, cli_env, "k-stdin")["k-stdin"]["status"] == "pending"
    assert installed.cli("retry", "no-such-key", env=cli_env).returncode == 1


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (["enqueue", "--stdin"], "not json", "not one JSON object"),
        (["enqueue", "--stdin"], '{"to_addresses": ["a@example.com"], "subject": "s", "bogus": 1}', "bogus"),
        (["enqueue", "--stdin"], '{"to_addresses": ["a@example.com"], "subject": "s"}', "email_deliveries_has_body"),
        (["enqueue", "--to", "a@example.com"], None, "--subject"),
        (["enqueue", "--stdin"], '{"dedupe_key": "a\\nb", "to_addresses": ["a@example.com"], "subject": "s", '
                                 '"text_body": "b"}', "dedupe_key: dedupe key 'a\\nb' contains the control character"),
        (["nonsense"], None, "invalid choice"),
    ],
)
def test_bad_input_exits_2_with_a_message(installed: Installed, cli_env: dict[str, str], args: list[str],
                                          stdin: str | None, message: str) -> None:
    out = installed.cli(*args, env=cli_env, input=stdin)
    assert out.returncode == 2
    assert message in out.stderr


def test_bad_setting_exits_2_naming_it(installed: Installed, cli_env: dict[str, str]) -> None:
    out = installed.cli("stats", env={**cli_env, "OUTBOX_MAILER_BATCH_SIZE": "lots"})
    assert out.returncode == 2 and "OUTBOX_MAILER_BATCH_SIZE" in out.stderr
    out = installed.cli("stats", env={k: v for k, v in cli_env.items() if k != "OUTBOX_MAILER_DATABASE_URL"})
    assert out.returncode == 2 and "OUTBOX_MAILER_DATABASE_URL is not set" in out.stderr


def test_unreachable_database_exits_3(installed: Installed, cli_env: dict[str, str]) -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    out = installed.cli("stats", env={**cli_env, "OUTBOX_MAILER_DATABASE_URL": url})
    assert out.returncode == 3 and "database unavailable" in out.stderr


def test_run_refuses_an_unmigrated_database(installed: Installed, cli_env: dict[str, str], empty_db_url: str) -> None:
    out = installed.cli("run", env={**cli_env, "OUTBOX_MAILER_DATABASE_URL": empty_db_url}, timeout=30)
    assert out.returncode == 2 and "outbox-mailer migrate" in out.stderr


def test_stats_json(installed: Installed, cli_env: dict[str, str]) -> None:
    installed.cli("enqueue", "--key", "s1", "--to", "a@example.com", "--subject", "s", "--text", "b", env=cli_env)
    out = installed.cli("stats", "--json", env=cli_env)
    stats = json.loads(out.stdout)
    assert stats["pending"] == 1 and stats["due_now"] == 1 and stats["oldest_due_age_seconds"] >= 0
    assert stats["transports"] == {}, "no transport has a limit"


def test_stats_shows_each_limited_transports_use_and_what_is_left(installed: Installed, cli_env: dict[str, str],
                                                                  db_url: str) -> None:
    limited = {**cli_env, "OUTBOX_MAILER_SMTP__RATE_PER_SECOND": "14", "OUTBOX_MAILER_SMTP__DAILY_LIMIT": "50000"}
    psql(db_url, "INSERT INTO email_transport_limits (transport) VALUES ('smtp'); "
                 "INSERT INTO email_transport_usage VALUES ('smtp', now(), 864, 7, 1234)")
    stats = json.loads(installed.cli("stats", "--json", env=limited).stdout)
    assert stats["transports"] == {"smtp": {
        "rate_per_second": 14.0, "configured_rate_per_second": 14.0, "throttles": 0, "requests_granted": 7,
        "window_seconds": 86400.0, "daily_limit": 50000, "daily_used": 1234, "daily_remaining": 48766}}
    text = installed.cli("stats", env=limited).stdout
    assert "transports.smtp.daily_remaining" in text and "48766" in text


def test_check_reports_each_dependency(installed: Installed, cli_env: dict[str, str]) -> None:
    ok = installed.cli("check", "--json", env={**cli_env, "OUTBOX_MAILER_SMTP__PASSWORD": "hunter2",
                                                "OUTBOX_MAILER_SMTP__USERNAME": "u",
                                                "OUTBOX_MAILER_SMTP__ALLOW_PLAINTEXT_AUTH": "true"})
    checks = {c["check"]: c for c in map(json.loads, ok.stdout.splitlines())}
    assert checks["database"]["ok"] and "hunter2" not in ok.stdout
    assert checks["configuration"]["detail"]["smtp"]["password"] == "**********"
    assert checks["staging guard"]["detail"] == "off: every recipient gets mail"
    down = installed.cli("check", env={**cli_env, "OUTBOX_MAILER_SMTP__PORT": str(free_port())})
    assert down.returncode == 3 and "[FAIL] smtp" in down.stdout
    guarded = installed.cli("check", env={**cli_env, "OUTBOX_MAILER_REDIRECT_TO": "qa@example.com"})
    assert "staging guard: OUTBOX_MAILER_REDIRECT_TO: every email goes to qa@example.com alone" in guarded.stdout


def test_demo_runs_from_the_install(installed: Installed) -> None:
    out = installed.cli("demo", env=base_env(), timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "demo finished: every committed email reached a final state" in out.stdout
    assert "bounce-permanent   failed" in out.stdout


def test_resolve_settles_only_in_doubt_rows(installed: Installed, cli_env: dict[str, str], db_url: str) -> None:
    installed.cli("enqueue", "--key", "unsure", "--to", "a@example.com", "--subject", "s", "--text", "b", env=cli_env)
    not_yet = installed.cli("resolve", "unsure", "--sent", env=cli_env)
    assert not_yet.returncode == 1 and "is pending" in not_yet.stderr
    psql(db_url, "UPDATE email_deliveries SET status = 'in_doubt', last_error = 'outcome unknown' "
                 "WHERE dedupe_key = 'unsure';")
    done = installed.cli("resolve", "unsure", "--sent", env=cli_env)
    assert done.returncode == 0, done.stderr
    row = status_json(installed, cli_env, "unsure")["unsure"]
    assert row["status"] == "sent" and row["sent_at"] and "resolved as sent" in row["last_error"]
    usage = installed.cli("resolve", "unsure", env=cli_env)
    assert usage.returncode == 2
