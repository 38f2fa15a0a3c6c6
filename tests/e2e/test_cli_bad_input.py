"""Hostile input through the installed CLI: every case exits 2 with one clear line, never a traceback."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import Installed, base_env
from tests.e2e.test_cli import psql, status_json

GOOD = {"to_addresses": ["a@example.com"], "subject": "s", "text_body": "b"}


@pytest.fixture
def env(db_url: str) -> dict[str, str]:
    return base_env(OUTBOX_MAILER_DATABASE_URL=db_url, OUTBOX_MAILER_SMTP__TLS="none",
                    OUTBOX_MAILER_DEFAULT_FROM="App <app@example.com>")


def assert_usage(out: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    for needle in needles:
        assert needle in out.stderr, out.stderr


def count_rows(db_url: str) -> int:
    out = subprocess.run(["psql", "-X", "-At", db_url, "-c", "SELECT count(*) FROM email_deliveries"],
                         capture_output=True, text=True, check=True, timeout=60)
    return int(out.stdout.strip())


# ---- settings: validated at start-up by every command --------------------------------------

COMMANDS = [
    ["migrate"], ["run"], ["status", "k"], ["enqueue", "--to", "a@example.com", "--subject", "s", "--text", "b"],
    ["retry", "k"], ["cancel", "k"], ["resolve", "k", "--sent"], ["list", "--status", "failed"], ["stats"],
    ["prune", "--dry-run"], ["grant", "--app-role", "app", "--daemon-role", "mailer"], ["check"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_every_command_refuses_a_bad_helo_name_at_start_up(installed: Installed, env: dict[str, str],
                                                           command: list[str]) -> None:
    out = installed.cli(*command, env={**env, "OUTBOX_MAILER_SMTP__HELO_NAME": "bad name"}, timeout=30)
    assert_usage(out, "OUTBOX_MAILER_SMTP__HELO_NAME")


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_every_command_refuses_a_misspelt_setting_naming_the_one_it_meant(installed: Installed, env: dict[str, str],
                                                                          command: list[str]) -> None:
    out = installed.cli(*command, env={**env, "OUTBOX_MAILER_SMTP__PASWORD": "hunter2"}, timeout=30)
    assert_usage(out, "OUTBOX_MAILER_SMTP__PASWORD (did you mean OUTBOX_MAILER_SMTP__PASSWORD?)")
    assert "hunter2" not in out.stderr + out.stdout


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("OUTBOX_MAILER_DEFAULT_FROM", "noreply at example"),
        ("OUTBOX_MAILER_DEFAULT_FROM", "Shop <noreply@shop.example.test>"),  # special-use: every row would fail
        ("OUTBOX_MAILER_DEFAULT_FROM", "noreply@host.invalid"),
        ("OUTBOX_MAILER_REDIRECT_TO", "qa@printer.local"),
        ("OUTBOX_MAILER_ALLOW_SPECIAL_USE_DOMAINS", "maybe"),
        ("OUTBOX_MAILER_TEXT_ALTERNATIVE", "sometimes"),
        ("OUTBOX_MAILER_SMTP__HELO_NAME", "bad name"),
        ("OUTBOX_MAILER_DATABASE_URL", "not a url"),
        ("OUTBOX_MAILER_SMTP", "notjson"),
        ("OUTBOX_MAILER_PAUSE_MAX_SECONDS", "1e12"),
        ("OUTBOX_MAILER_RETRY__MAX_SECONDS", "inf"),
        ("OUTBOX_MAILER_POLL_INTERVAL_SECONDS", "inf"),
        ("OUTBOX_MAILER_ALLOWED_RECIPIENTS", "qa@example.com,,@example.org"),
        ("OUTBOX_MAILER_REDIRECT_TO", "qa at example"),
        ("OUTBOX_MAILER_SMTP__RATE_PER_SECOND", "0"),
        ("OUTBOX_MAILER_SMTP__RATE_PER_SECOND", "-5"),
        ("OUTBOX_MAILER_SMTP__BURST", "0"),
        ("OUTBOX_MAILER_SMTP__DAILY_LIMIT", "0"),
        ("OUTBOX_MAILER_SMTP__DAILY_LIMIT", "-50"),
        ("OUTBOX_MAILER_SMTP__DAILY_WINDOW_SECONDS", "0"),
        ("OUTBOX_MAILER_SMTP__FALLBACK", "nope"),
        ("OUTBOX_MAILER_SMTP__FALLBACK", "smtp"),
    ],
)
def test_check_refuses_settings_that_would_fail_at_run_time(installed: Installed, env: dict[str, str],
                                                            variable: str, value: str) -> None:
    out = installed.cli("check", env={**env, variable: value}, timeout=30)
    assert_usage(out, variable)
    assert "[ok]" not in out.stdout
    assert len(out.stderr.strip().splitlines()) == 1


def test_run_refuses_a_special_use_sender_before_touching_a_row(installed: Installed, env: dict[str, str],
                                                                db_url: str) -> None:
    assert installed.cli("migrate", env=env, timeout=60).returncode == 0
    psql(db_url, "INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body) "
                 "VALUES ('untouched', ARRAY['a@example.com'], 's', 'b')")
    sender = "Shop <noreply@shop.example.test>"
    out = installed.cli("run", env={**env, "OUTBOX_MAILER_DEFAULT_FROM": sender}, timeout=30)
    assert_usage(out, "OUTBOX_MAILER_DEFAULT_FROM", "special-use or reserved name")
    assert status_json(installed, env, "untouched")["untouched"]["status"] == "pending"
    allowed = installed.cli("check", env={**env, "OUTBOX_MAILER_DEFAULT_FROM": sender,
                                          "OUTBOX_MAILER_ALLOW_SPECIAL_USE_DOMAINS": "true"}, timeout=30)
    assert "[ok] configuration" in allowed.stdout, allowed.stderr
    assert "[ok] addresses: special-use domains (.local, .test, .home.arpa ...) allowed" in allowed.stdout


def test_run_refuses_both_staging_guards_at_once(installed: Installed, env: dict[str, str]) -> None:
    out = installed.cli("run", env={**env, "OUTBOX_MAILER_ALLOWED_RECIPIENTS": "@example.com",
                                    "OUTBOX_MAILER_REDIRECT_TO": "qa@example.com"}, timeout=30)
    assert_usage(out, "OUTBOX_MAILER_ALLOWED_RECIPIENTS and OUTBOX_MAILER_REDIRECT_TO are both set")


def test_prune_with_an_absurd_retention_exits_2(installed: Installed, env: dict[str, str]) -> None:
    for variable in ("OUTBOX_MAILER_PRUNE__DELETE_AFTER_DAYS", "OUTBOX_MAILER_PRUNE__SCRUB_AFTER_DAYS"):
        out = installed.cli("prune", env={**env, variable: "1e12"})
        assert_usage(out, variable)


def test_a_dotenv_file_that_is_not_utf8_exits_2_naming_it(installed: Installed, env: dict[str, str],
                                                          tmp_path: Path) -> None:
    (tmp_path / ".env").write_bytes(b"OUTBOX_MAILER_BATCH_SIZE=\xff\n")
    out = subprocess.run([str(installed.bin / "outbox-mailer"), "stats"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=30)
    assert_usage(out, ".env", "UTF-8")
    assert len(out.stderr.strip().splitlines()) == 1


# ---- enqueue --------------------------------------------------------------------------------


def test_enqueue_refuses_an_empty_key_instead_of_inventing_one(installed: Installed, env: dict[str, str],
                                                               db_url: str) -> None:
    for _ in range(2):
        out = installed.cli("enqueue", "--key", "", "--to", "a@example.com", "--subject", "s", "--text", "b",
                            env=env)
        assert_usage(out, "--key")
    assert count_rows(db_url) == 0


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"headers": []}, "headers"),
        ({"headers": {"X-A": 1}}, "headers"),
        ({"attachments": {}}, "attachments"),
        ({"attachments": [{"filename": "a.txt"}]}, "attachments[0]"),
        ({"attachments": ["x"]}, "attachments[0]"),
        ({"metadata": []}, "metadata"),
        ({"priority": 1.5}, "priority"),
        ({"priority": True}, "priority"),
        ({"priority": "1"}, "priority"),
        ({"priority": 40_000}, "priority"),
        ({"max_attempts": 1.0}, "max_attempts"),
        ({"max_attempts": False}, "max_attempts"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"subject": 5}, "subject"),
        ({"to_addresses": [1]}, "to_addresses"),
        ({"to_addresses": {"a": "b"}}, "to_addresses"),
        ({"cc_addresses": [None]}, "cc_addresses"),
        ({"text_body": ["x"]}, "text_body"),
        ({"from_address": 1}, "from_address"),
        ({"transport": 3}, "transport"),
        ({"dedupe_key": 5}, "dedupe_key"),
        ({"scheduled_at": 1_700_000_000}, "scheduled_at"),
        ({"expires_at": ["2099-01-01T00:00:00+00:00"]}, "expires_at"),
    ],
)
def test_enqueue_stdin_refuses_wrong_types_naming_the_field(installed: Installed, env: dict[str, str],
                                                            db_url: str, override: dict[str, object],
                                                            field: str) -> None:
    out = installed.cli("enqueue", "--stdin", env=env, input=json.dumps({**GOOD, **override}))
    assert_usage(out, field)
    assert count_rows(db_url) == 0


def test_enqueue_stdin_refuses_nan_and_infinity(installed: Installed, env: dict[str, str], db_url: str) -> None:
    out = installed.cli("enqueue", "--stdin", env=env, input=json.dumps(GOOD)[:-1] + ', "metadata": {"x": NaN}}')
    assert_usage(out, "NaN")
    assert count_rows(db_url) == 0


def test_enqueue_stdin_refuses_deep_nesting(installed: Installed, env: dict[str, str], db_url: str) -> None:
    deep = "[" * 1000 + "]" * 1000
    out = installed.cli("enqueue", "--stdin", env=env, input=json.dumps(GOOD)[:-1] + f', "metadata": {{"x": {deep}}}}}')
    assert_usage(out, "nested")
    bare = installed.cli("enqueue", "--stdin", env=env, input="[" * 100_000 + "]" * 100_000)
    assert_usage(bare, "nested")
    assert count_rows(db_url) == 0


def test_enqueue_stdin_keeps_moderate_nesting_in_metadata(installed: Installed, env: dict[str, str]) -> None:
    nested: object = "leaf"
    for _ in range(20):
        nested = {"n": nested}
    out = installed.cli("enqueue", "--stdin", "--json", env=env,
                        input=json.dumps({**GOOD, "dedupe_key": "nested-ok", "metadata": {"tree": nested}}))
    assert out.returncode == 0, out.stderr


def test_enqueue_stdin_refuses_oversized_and_undecodable_input(installed: Installed, env: dict[str, str]) -> None:
    small = {**env, "OUTBOX_MAILER_MAX_MESSAGE_BYTES": "1024"}
    big = json.dumps({**GOOD, "text_body": "x" * (1024 * 1024)})  # over the 1 MiB floor of the limit
    assert_usage(installed.cli("enqueue", "--stdin", env=small, input=big), "bytes")
    raw = subprocess.run([str(installed.bin / "outbox-mailer"), "enqueue", "--stdin"], env=env,
                         input=b'{"subject": "\xff"}', capture_output=True, timeout=30)
    assert raw.returncode == 2 and b"UTF-8" in raw.stderr and b"Traceback" not in raw.stderr


# ---- keys, windows, limits, intervals ---------------------------------------------------------


@pytest.mark.parametrize("command", [["status"], ["retry"], ["cancel"], ["resolve", "--sent"]], ids=lambda c: c[0])
def test_a_key_that_is_not_utf8_exits_2(installed: Installed, env: dict[str, str], command: list[str]) -> None:
    out = subprocess.run([str(installed.bin / "outbox-mailer"), command[0], b"bad-\xff-key", *command[1:]],
                         env=env, capture_output=True, timeout=30)
    assert out.returncode == 2, out.stderr
    assert b"UTF-8" in out.stderr and b"Traceback" not in out.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["list", "--status", "failed", "--limit", "-1"],
        ["list", "--status", "failed", "--limit", "0"],
        ["list", "--status", "failed", "--since", "99999999999999999999w"],
        ["list", "--status", "failed", "--since", "\u0661h"],
        ["retry", "--status", "failed", "--since", "99999999999999999999w", "--yes"],
        ["retry", "--status", "failed", "--since", "1\u0660m", "--yes"],
        ["stats", "--watch", "--interval", "-1"],
        ["stats", "--watch", "--interval", "nan"],
        ["stats", "--watch", "--interval", "inf"],
        ["stats", "--watch", "--interval", "0"],
        ["enqueue", "--to", "a@example.com", "--subject", "s", "--text", "b", "--priority", "99999"],
        ["retry", "k", "--attempts", "0"],
    ],
)
def test_out_of_range_arguments_exit_2(installed: Installed, env: dict[str, str], args: list[str]) -> None:
    out = installed.cli(*args, env=env, timeout=15)
    assert_usage(out)


# ---- retry honours the row's own limit ----------------------------------------------------------


def test_retry_gives_a_row_as_many_tries_as_its_own_max_attempts(installed: Installed, env: dict[str, str],
                                                                 db_url: str) -> None:
    psql(db_url, """
        INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, status, attempts, max_attempts,
                                      last_error)
        VALUES ('once', ARRAY['a@example.com'], 's', 'b', 'failed', 1, 1, 'gave up'),
               ('default', ARRAY['a@example.com'], 's', 'b', 'failed', 8, NULL, 'gave up'),
               ('chosen', ARRAY['a@example.com'], 's', 'b', 'failed', 2, 2, 'gave up');
    """)
    for key in ("once", "default"):
        assert installed.cli("retry", key, env=env).returncode == 0
    out = installed.cli("retry", "chosen", "--attempts", "5", env=env)
    assert out.returncode == 0, out.stderr
    rows = status_json(installed, env, "once", "default", "chosen")
    assert rows["once"]["status"] == "pending" and rows["once"]["max_attempts"] == 2  # 1 done + 1 new try
    assert rows["default"]["max_attempts"] == 16  # 8 done + OUTBOX_MAILER_MAX_ATTEMPTS (8)
    assert rows["chosen"]["max_attempts"] == 7  # 2 done + --attempts 5


def test_help_is_plain_text(installed: Installed, env: dict[str, str]) -> None:
    for args in (["--help"], ["retry", "--help"], ["enqueue", "--help"], ["stats", "--help"]):
        out = installed.cli(*args, env=env)
        assert out.returncode == 0
        assert "`" not in out.stdout, out.stdout
    retry_help = installed.cli("retry", "--help", env=env).stdout
    assert "max_attempts" in retry_help and "--attempts" in retry_help
