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
        ({"subject": "NULL"}, "not-null"),
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
