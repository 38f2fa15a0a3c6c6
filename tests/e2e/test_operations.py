"""Operator commands through the installed CLI: list, bulk retry, stats --watch, prune, grant."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from tests.e2e.conftest import Installed, base_env
from tests.e2e.test_cli import psql


@pytest.fixture
def env(db_url: str) -> dict[str, str]:
    return base_env(OUTBOX_MAILER_DATABASE_URL=db_url, OUTBOX_MAILER_SMTP__TLS="none")


def seed(db_url: str) -> None:
    psql(db_url, """
        INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, status, last_error, attempts)
        SELECT 'f' || g, ARRAY['a@example.com'], 's', 'b', 'failed', '550 no such user', 1
        FROM generate_series(1, 5) g;
        INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, status, last_error)
        VALUES ('old-failure', ARRAY['a@example.com'], 's', 'b', 'failed', 'long ago');
        UPDATE email_deliveries SET updated_at = now() - interval '3 days' WHERE dedupe_key = 'old-failure';
        INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body)
        VALUES ('waiting', ARRAY['a@example.com'], 's', 'b');
    """)


def test_list_filters_by_status_and_window(installed: Installed, env: dict[str, str], db_url: str) -> None:
    seed(db_url)
    out = installed.cli("list", "--status", "failed", "--since", "1h", "--json", env=env)
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert out.returncode == 0 and sorted(r["dedupe_key"] for r in rows) == [f"f{i}" for i in range(1, 6)]
    wide = installed.cli("list", "--status", "failed", "--status", "pending", "--since", "7d", env=env)
    assert "old-failure" in wide.stdout and "waiting" in wide.stdout and "550 no such user" in wide.stdout
    none = installed.cli("list", "--status", "in_doubt", env=env)
    assert none.returncode == 1
    bad = installed.cli("list", "--status", "failed", "--since", "soon", env=env)
    assert bad.returncode == 2 and "not a duration" in bad.stderr


def test_bulk_retry_counts_confirms_and_requeues(installed: Installed, env: dict[str, str], db_url: str) -> None:
    seed(db_url)
    refused = installed.cli("retry", "--status", "failed", "--since", "1h", env=env, input="")
    assert refused.returncode == 2 and "add --yes" in refused.stderr
    done = installed.cli("retry", "--status", "failed", "--since", "1h", "--yes", "--json", env=env)
    assert done.returncode == 0 and json.loads(done.stdout) == {"status": "failed", "requeued": 5}
    rows = {r["dedupe_key"]: r for r in map(json.loads, installed.cli(
        "status", "f1", "old-failure", "--json", env=env).stdout.splitlines())}
    assert rows["f1"]["status"] == "pending" and rows["f1"]["max_attempts"] == 9  # attempts 1 + 8 more
    assert rows["old-failure"]["status"] == "failed", "outside the window"
    again = installed.cli("retry", "--status", "failed", "--since", "1h", "--yes", env=env)
    assert again.returncode == 1
    both = installed.cli("retry", "f1", "--status", "failed", env=env)
    assert both.returncode == 2


def test_stats_watch_refreshes_until_interrupted(installed: Installed, env: dict[str, str], db_url: str) -> None:
    seed(db_url)
    proc = subprocess.Popen([str(installed.bin / "outbox-mailer"), "stats", "--watch", "--interval", "0.2",
                             "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(2.5)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=10)
    samples = [json.loads(line) for line in out.splitlines()]
    assert len(samples) >= 3 and all(s["failed"] == 6 and s["pending"] == 1 for s in samples)
    assert proc.returncode == 0


def test_prune_dry_run_then_prune(installed: Installed, env: dict[str, str], db_url: str) -> None:
    seed(db_url)
    psql(db_url, "UPDATE email_deliveries SET updated_at = now() - interval '400 days', "
                 "created_at = now() - interval '400 days' WHERE dedupe_key = 'f1';"
                 "UPDATE email_deliveries SET updated_at = now() - interval '40 days', created_at = now() - interval '40 days' "
                 "WHERE dedupe_key = 'f2';")
    dry = installed.cli("prune", "--dry-run", "--json", env=env)
    assert json.loads(dry.stdout) == {"would_scrub": 2, "would_delete": 1}
    done = installed.cli("prune", "--json", env=env)
    assert json.loads(done.stdout) == {"scrubbed": 2, "deleted": 1, "unmatched_events": 0, "webhook_tokens": 0}
    gone = installed.cli("status", "f1", env=env)
    assert gone.returncode == 1


def test_grant_prints_or_applies_least_privilege(installed: Installed, env: dict[str, str], db_url: str) -> None:
    sql = installed.cli("grant", "--app-role", "shop", "--daemon-role", "mailer", "--print-sql", env=env)
    assert sql.returncode == 0 and 'GRANT INSERT (dedupe_key' in sql.stdout and '"shop"' in sql.stdout
    missing = installed.cli("grant", "--app-role", "no_such_role_x", "--daemon-role", "mailer", env=env)
    assert missing.returncode != 0 and "no_such_role_x" in missing.stderr
    unsafe = installed.cli("grant", "--app-role", 'a"b', "--daemon-role", "mailer", env=env)
    assert unsafe.returncode == 2
