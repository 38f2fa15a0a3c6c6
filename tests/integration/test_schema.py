"""The table's constraints refuse bad rows at INSERT time, from any client."""

from __future__ import annotations

import subprocess

import pytest

GOOD = {
    "dedupe_key": "'k1'",
    "to_addresses": "ARRAY['a@example.com']",
    "subject": "'hi'",
    "text_body": "'body'",
}


def insert(url: str, **overrides: str) -> subprocess.CompletedProcess[str]:
    cols = {**GOOD, **overrides}
    cols = {k: v for k, v in cols.items() if v is not None}
    stmt = f"INSERT INTO email_deliveries ({', '.join(cols)}) VALUES ({', '.join(cols.values())})"
    return subprocess.run(["psql", "-X", "-v", "ON_ERROR_STOP=1", url, "-c", stmt], capture_output=True, text=True)


def test_a_good_row_is_accepted(db_url: str) -> None:
    result = insert(db_url)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("overrides", "constraint"),
    [
        ({"dedupe_key": "''"}, "email_deliveries_dedupe_key_valid"),
        ({"dedupe_key": "repeat('k', 256)"}, "email_deliveries_dedupe_key_valid"),
        ({"dedupe_key": "E'a\\nb'"}, "email_deliveries_dedupe_key_valid"),
        ({"dedupe_key": "E'a\\tb'"}, "email_deliveries_dedupe_key_valid"),
        ({"dedupe_key": "NULL"}, "not-null"),
        ({"status": "'queued'"}, "email_deliveries_status_valid"),
        ({"to_addresses": "ARRAY[]::text[]"}, "email_deliveries_has_recipient"),
        ({"to_addresses": "ARRAY[NULL]::text[]"}, "email_deliveries_has_recipient"),
        ({"cc_addresses": "ARRAY[NULL]::text[]"}, "email_deliveries_cc_bcc_no_nulls"),
        ({"text_body": "NULL"}, "email_deliveries_has_body"),
        ({"status": "'sent'"}, "email_deliveries_sent_iff_sent_at"),
        ({"sent_at": "now()"}, "email_deliveries_sent_iff_sent_at"),
        ({"status": "'sending'"}, "email_deliveries_claimed_iff_sending"),
        ({"headers": "'[]'"}, "email_deliveries_headers_object"),
        ({"headers": "'\"x\"'"}, "email_deliveries_headers_object"),
        ({"attachments": "'{}'"}, "email_deliveries_attachments_array"),
        ({"metadata": "'[1]'"}, "email_deliveries_metadata_object"),
        ({"max_attempts": "0"}, "email_deliveries_attempts_valid"),
        ({"attempts": "-1"}, "email_deliveries_attempts_valid"),
        ({"transport": "''"}, "email_deliveries_transport_valid"),
        ({"subject": "NULL"}, "email_deliveries_has_subject"),  # without a template (schema 27)
        # every rule a plain row can break, which schema 30's conjunction must not let through
        ({"to_addresses": "ARRAY[['a@example.com']]"}, "email_deliveries_addresses_flat"),
        ({"cc_addresses": "ARRAY[['c@example.com']]"}, "email_deliveries_addresses_flat"),
        ({"bcc_addresses": "ARRAY[['b@example.com']]"}, "email_deliveries_addresses_flat"),
        ({"bcc_addresses": "ARRAY[NULL]::text[]"}, "email_deliveries_cc_bcc_no_nulls"),
        ({"text_body": "NULL", "html_body": "NULL"}, "email_deliveries_has_body"),
        ({"metadata": "'{\"n\": 1e301}'"}, "a JSON number beyond"),  # short as typed, long as stored
        ({"metadata": "'{\"n\": -1e301}'"}, "a JSON number beyond"),
        ({"transport": "repeat('t', 65)"}, "email_deliveries_transport_valid"),
        ({"transport": "E'smtp\\n'"}, "email_deliveries_transport_valid"),
        ({"claim_token": "gen_random_uuid()", "claimed_at": "now()"}, "email_deliveries_claimed_iff_sending"),
        ({"delivery_event": "'opened'"}, "email_deliveries_delivery_event_valid"),
        ({"scheduled_at": "'infinity'"}, "email_deliveries_scheduled_at_range"),
        ({"updated_at": "'10000-01-01'"}, "email_deliveries_updated_at_range"),
        ({"created_at": "'0500-01-01'"}, "email_deliveries_created_at_range"),
        ({"expires_at": "'-infinity'"}, "email_deliveries_expires_at_range"),
        ({"template_version": "1"}, "email_deliveries_content_or_template"),
        ({"locale": "'de'"}, "email_deliveries_content_or_template"),
        ({"template_data": "'{}'"}, "email_deliveries_content_or_template"),
    ],
)
def test_constraints_refuse_bad_inserts(db_url: str, overrides: dict[str, str], constraint: str) -> None:
    result = insert(db_url, **overrides)
    assert result.returncode != 0
    if constraint == "not-null":
        assert "null value" in result.stderr
    else:
        assert constraint in result.stderr


def test_duplicate_dedupe_key_is_ignored_with_on_conflict(db_url: str) -> None:
    assert insert(db_url).returncode == 0
    stmt = (
        "INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body) "
        "VALUES ('k1', ARRAY['b@example.com'], 'other', 'x') ON CONFLICT (dedupe_key) DO NOTHING"
    )
    out = subprocess.run(["psql", "-X", "-v", "ON_ERROR_STOP=1", db_url, "-c", stmt], capture_output=True, text=True)
    assert "INSERT 0 0" in out.stdout
    plain = insert(db_url)
    assert plain.returncode != 0 and "email_deliveries_dedupe_key_key" in plain.stderr


def psql(url: str, statement: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["psql", "-X", "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose", "-At", url, "-c", statement],
                          capture_output=True, text=True)


def test_the_daemons_updates_evaluate_no_check_constraint(db_url: str) -> None:
    # PostgreSQL prepares and evaluates every CHECK of a table in each statement that updates it, whatever
    # the columns it sets: the rules live in the INSERT trigger and in other sessions' UPDATE trigger
    checks = psql(db_url, "SELECT string_agg(conname, ' ') FROM pg_constraint "
                          "WHERE conrelid = 'email_deliveries'::regclass AND contype = 'c'")
    assert checks.returncode == 0, checks.stderr
    assert checks.stdout.strip() == ""


@pytest.mark.parametrize(
    ("assignment", "constraint"),
    [
        ("status = 'queued'", "email_deliveries_status_valid"),
        ("status = 'sent'", "email_deliveries_sent_iff_sent_at"),
        ("sent_at = now()", "email_deliveries_sent_iff_sent_at"),
        ("status = 'sending'", "email_deliveries_claimed_iff_sending"),
        ("claim_token = gen_random_uuid(), claimed_at = now()", "email_deliveries_claimed_iff_sending"),
        ("max_attempts = 0", "email_deliveries_attempts_valid"),
        ("attempts = -1", "email_deliveries_attempts_valid"),
        ("delivery_event = 'opened'", "email_deliveries_delivery_event_valid"),
        ("scheduled_at = 'infinity'", "email_deliveries_scheduled_at_range"),
        ("updated_at = '10000-01-01'", "email_deliveries_updated_at_range"),
    ],
)
def test_an_update_outside_the_daemon_is_refused_by_the_rules_name(db_url: str, assignment: str,
                                                                    constraint: str) -> None:
    assert insert(db_url).returncode == 0
    result = psql(db_url, f"UPDATE email_deliveries SET {assignment} WHERE dedupe_key = 'k1'")
    assert result.returncode != 0
    assert "23514" in result.stderr and constraint in result.stderr


def test_a_valid_update_outside_the_daemon_keeps_the_queue(db_url: str) -> None:
    assert insert(db_url).returncode == 0
    done = psql(db_url, "UPDATE email_deliveries SET status = 'cancelled', updated_at = now() WHERE dedupe_key = 'k1'")
    assert done.returncode == 0, done.stderr
    assert psql(db_url, "SELECT count(*) FROM email_queue").stdout.strip() == "0"
