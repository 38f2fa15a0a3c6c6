"""The built wheel carries the schema, and `migrate` works from a non-editable install."""

from __future__ import annotations

import subprocess
import zipfile

from tests.e2e.conftest import Installed, base_env, wheel_names


def test_wheel_contains_migrations_and_queries(installed: Installed) -> None:
    names = wheel_names(installed.wheel)
    assert "outbox_mailer/migrations/0001_email_deliveries.sql" in names
    assert "outbox_mailer/store/queries.sql" in names and "outbox_mailer/store/console_queries.sql" in names
    assert "outbox_mailer/console/templates/email.html" in names and "outbox_mailer/console/static/refresh.js" in names
    assert "outbox_mailer/migrations/grants/console_role.sql" in names


def test_the_wheel_carries_the_mit_license_its_metadata_names(installed: Installed) -> None:
    names = wheel_names(installed.wheel)
    [license_file] = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
    with zipfile.ZipFile(installed.wheel) as wheel:
        text = wheel.read(license_file).decode()
        metadata = wheel.read(license_file.split("/")[0] + "/METADATA").decode()
    assert text.startswith("MIT License") and "Copyright (c) 2026 The outbox-mailer authors" in text
    assert "License: MIT" in metadata.splitlines()


def test_migrate_from_the_installed_wheel(installed: Installed, empty_db_url: str) -> None:
    env = base_env(OUTBOX_MAILER_DATABASE_URL=empty_db_url)
    first = installed.cli("migrate", env=env)
    assert first.returncode == 0, first.stderr
    assert "applied 0001_email_deliveries.sql" in first.stdout
    again = installed.cli("migrate", env=env)
    assert again.returncode == 0 and "nothing to do" in again.stdout
    tables = subprocess.run(["psql", "-X", "-At", empty_db_url, "-c",
                             "SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_tables "
                             "WHERE schemaname = 'public'"], capture_output=True, text=True, check=True)
    assert tables.stdout.strip() == (
        "email_batches,email_console_sessions,email_console_users,email_daemon_processes,email_deliveries,email_delivery_attempts,"
        "email_delivery_events,email_operator_actions,email_queue,email_suppressions,email_templates,email_transport_limits,"
        "email_transport_pauses,email_transport_usage,email_webhook_tokens,outbox_mailer_migrations")


def test_print_sql_needs_no_database(installed: Installed) -> None:
    out = installed.cli("migrate", "--print-sql", env=base_env())
    assert out.returncode == 0 and "CREATE TABLE email_deliveries" in out.stdout


def test_python_dash_m_runs_the_cli(installed: Installed) -> None:
    out = subprocess.run([str(installed.bin / "python"), "-m", "outbox_mailer", "--version"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("outbox-mailer ")
