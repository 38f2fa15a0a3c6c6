"""Hostile rows refused at INSERT, in the application's transaction (schema 12, sql/0012_refused_at_insert.sql).

Issue 16, item 5. A matrix of hostile rows, each inserted with the real ``psql`` and with
asyncpg: refused with SQLSTATE 23514 and the constraint that says what is wrong, wherever SQL
can tell. The rows SQL cannot judge (address syntax, IDN, base64, reserved header names ...)
are accepted and then failed by the real daemon against the real SMTP test server, with the
field named. A matrix of legitimate odd rows is accepted and sent: SQL never refuses a row the
daemon sends. The same injections written before schema 12 are failed by the daemon
(test_refused_at_insert_upgrade.py). No injected header or recipient ever reaches the SMTP server.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest

from outbox_mailer.message.addresses import find_control_character
from tests.conftest import cloned_database
from tests.smtp_server import SmtpTestServer
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio

VICTIM = "victim@example.net"  # every injection tries to reach this address or to add a header naming it
INJECTED = "X-Injected"
GOOD: dict[str, Any] = {"to_addresses": ["to@example.com"], "subject": "hello", "text_body": "body"}
ATTACHMENT = {"filename": "a.txt", "content_type": "text/plain", "content_base64": "aGVsbG8="}

# id: (columns over GOOD, constraint, DETAIL fragment)
REFUSED: dict[str, tuple[dict[str, Any], str, str]] = {
    "subject-crlf-bcc": ({"subject": f"hi\r\nBcc: {VICTIM}"}, "email_deliveries_subject_no_control_chars",
                         "U+000D at position 3"),
    "subject-lf-header": ({"subject": f"hi\n{INJECTED}: 1"}, "email_deliveries_subject_no_control_chars", "U+000A"),
    "subject-tab": ({"subject": "a\tb"}, "email_deliveries_subject_no_control_chars", "U+0009"),
    "subject-nel": ({"subject": "a\u0085b"}, "email_deliveries_subject_no_control_chars", "U+0085"),
    "subject-line-separator": ({"subject": "a\u2028b"}, "email_deliveries_subject_no_control_chars", "U+2028"),
    "subject-paragraph-separator": ({"subject": "a\u2029b"}, "email_deliveries_subject_no_control_chars", "U+2029"),
    "subject-del": ({"subject": "a\x7fb"}, "email_deliveries_subject_no_control_chars", "U+007F"),
    "subject-escape": ({"subject": "\x1b[31mred"}, "email_deliveries_subject_no_control_chars", "U+001B"),
    "subject-c1-last": ({"subject": "a\x9fb"}, "email_deliveries_subject_no_control_chars", "U+009F"),
    "from-crlf": ({"from_address": f"a@example.com\r\nBcc: {VICTIM}"},
                  "email_deliveries_from_address_no_control_chars", "from_address holds"),
    "reply-to-lf": ({"reply_to": f"r@example.com\n{INJECTED}: 1"}, "email_deliveries_reply_to_no_control_chars",
                    "reply_to holds"),
    "to-crlf-rcpt": ({"to_addresses": ["to@example.com", f"x@example.com\r\nRCPT TO:<{VICTIM}>"]},
                     "email_deliveries_to_addresses_no_control_chars", "to_addresses[1] holds"),
    "cc-lf": ({"cc_addresses": [f"cc@example.com\n{VICTIM}"]}, "email_deliveries_cc_addresses_no_control_chars",
              "cc_addresses[0] holds"),
    "bcc-nel": ({"bcc_addresses": ["b@example.com", "c@example.com", "d@example.com\x85"]},
                        "email_deliveries_bcc_addresses_no_control_chars", "bcc_addresses[2] holds"),
    "header-value-crlf-bcc": ({"headers": {"X-Note": f"a\r\nBcc: {VICTIM}"}},
                              "email_deliveries_header_values_no_control_chars", "headers.X-Note holds"),
    "header-value-tab": ({"headers": {"X-Note": "a\tb"}}, "email_deliveries_header_values_no_control_chars",
                         "U+0009"),
    "header-value-u2029": ({"headers": {"X-A": "ok", "X-B": "a\u2029b"}},
                           "email_deliveries_header_values_no_control_chars", "headers.X-B holds"),
    "header-name-crlf": ({"headers": {f"X-A\r\nBcc: {VICTIM}\r\nX-B": "v"}}, "email_deliveries_header_names_valid",
                         "header name"),
    "header-name-space": ({"headers": {"X Note": "v"}}, "email_deliveries_header_names_valid", '"X Note"'),
    "header-name-colon": ({"headers": {f"Bcc: {VICTIM}": "v"}}, "email_deliveries_header_names_valid", "colon"),
    "header-name-empty": ({"headers": {"": "v"}}, "email_deliveries_header_names_valid", "header name"),
    "header-name-non-ascii": ({"headers": {"X-Ü": "v"}}, "email_deliveries_header_names_valid", "header name"),
    "header-name-77-chars": ({"headers": {"X" * 77: "v"}}, "email_deliveries_header_names_valid", "header name"),
    "header-value-number": ({"headers": {"X-Count": 3}}, "email_deliveries_header_values_strings",
                            "headers.X-Count is a JSON number"),
    "header-value-null": ({"headers": {"X-Count": None}}, "email_deliveries_header_values_strings", "JSON null"),
    "header-value-list": ({"headers": {"X-To": [VICTIM]}}, "email_deliveries_header_values_strings", "JSON array"),
    "attachment-string": ({"attachments": ["a.txt"]}, "email_deliveries_attachments_entries_object",
                          "attachments[0] is a JSON string"),
    "attachment-null": ({"attachments": [ATTACHMENT, None]}, "email_deliveries_attachments_entries_object",
                        "attachments[1] is a JSON null"),
    "attachment-array": ({"attachments": [[ATTACHMENT]]}, "email_deliveries_attachments_entries_object",
                         "JSON array"),
    "attachment-missing-base64": ({"attachments": [{"filename": "a.txt", "content_type": "text/plain"}]},
                                  "email_deliveries_attachments_entries_keys", "attachments[0] has no content_base64"),
    "attachment-empty-object": ({"attachments": [{}]}, "email_deliveries_attachments_entries_keys",
                                "content_base64, content_type, filename"),
    "attachment-unknown-key": ({"attachments": [ATTACHMENT, {**ATTACHMENT, "headers": {"Bcc": VICTIM}}]},
                               "email_deliveries_attachments_entries_keys", 'attachments[1] has unknown keys: "headers"'),
    "attachment-base64-number": ({"attachments": [{**ATTACHMENT, "content_base64": 12}]},
                                 "email_deliveries_attachments_entries_strings",
                                 "attachments[0].content_base64 is a JSON number"),
    "attachment-filename-null": ({"attachments": [{**ATTACHMENT, "filename": None}]},
                                 "email_deliveries_attachments_entries_strings", "filename is a JSON null"),
    "attachment-type-object": ({"attachments": [{**ATTACHMENT, "content_type": {"type": "text"}}]},
                               "email_deliveries_attachments_entries_strings", "content_type is a JSON object"),
    "attachment-filename-crlf": ({"attachments": [{**ATTACHMENT, "filename": f"a.txt\r\nBcc: {VICTIM}"}]},
                                 "email_deliveries_attachments_filename_no_control_chars",
                                 "attachments[0].filename holds"),
}

# What SQL cannot judge: accepted at INSERT, failed by the daemon naming the field (last_error).
DAEMON_FAILS: dict[str, tuple[dict[str, Any], str]] = {
    "to-not-an-address": ({"to_addresses": ["not an address"]}, "to_addresses[0]"),
    "to-comma-smuggled": ({"to_addresses": [f"to@example.com, {VICTIM}"]}, "to_addresses[0]"),
    "cc-bad-idn": ({"cc_addresses": ["someone@exa mple..com"]}, "cc_addresses[0]"),
    "bcc-special-use-domain": ({"bcc_addresses": ["jürgen@printer.local"]}, "bcc_addresses[0]"),
    "from-two-mailboxes": ({"from_address": f"Evil <a@example.com>, {VICTIM}"}, "from_address"),
    "reply-to-empty": ({"reply_to": ""}, "reply_to"),
    "header-reserved-bcc": ({"headers": {"Bcc": VICTIM}}, "headers.Bcc"),
    "header-reserved-content-type": ({"headers": {"Content-Type": "text/html"}}, "headers.Content-Type"),
    "header-word-too-long": ({"headers": {"X-Token": "t" * 1000}}, "headers.X-Token"),
    "attachment-bad-base64": ({"attachments": [{**ATTACHMENT, "content_base64": "not base64!"}]},
                              "attachments[0].content_base64"),
    "attachment-bad-media-type": ({"attachments": [{**ATTACHMENT, "content_type": "text"}]},
                                  "attachments[0].content_type"),
    "attachment-message-type": ({"attachments": [{**ATTACHMENT, "content_type": "message/rfc822"}]},
                                "attachments[0].content_type"),
    "attachment-empty-filename": ({"attachments": [{**ATTACHMENT, "filename": ""}]}, "attachments[0].filename"),
}

# Legitimate odd rows: accepted at INSERT and sent by the daemon.
SENT: dict[str, dict[str, Any]] = {
    "unicode-subject": {"subject": "Ünïcødé ✓ 日本語 🎉 — «quoted» ‘x’"},
    "nbsp-zwj-rtl-subject": {"subject": "a\u00a0b \u200d \u200f\u05e9\u05dc\u05d5\u05dd \ufeff end"},
    "long-subject": {"subject": "word " * 400},
    "encoded-word-lookalike": {"subject": "=?utf-8?q?not_a_header?= literal"},
    "unicode-display-names": {"from_address": "Jürgen Müller <jurgen@example.com>",
                              "to_addresses": ["\"Doe, Jane\" <jane@example.com>", "Zoë <zoe@bücher.example>"]},
    "idn-addresses": {"to_addresses": ["someone@bücher.example"], "cc_addresses": ["x@exämple.com"]},
    "non-ascii-local-parts": {"to_addresses": ["Zoë <zoë@example.com>"], "bcc_addresses": ["jürgen@example.com"]},
    "reply-to-null": {"reply_to": None},
    "reply-to-set": {"reply_to": "Support <help@example.com>"},
    "long-unfoldable-header": {"headers": {"List-Unsubscribe": "<https://example.com/u?" + "t" * 950 + ">"}},
    "long-folded-header": {"headers": {"X-Long": " ".join(["word"] * 300)}},
    "header-name-punctuation": {"headers": {"X-!#$%&'*+-.^_`|~9": "v"}},
    "header-76-char-name": {"headers": {"X" * 76: "v"}},
    "header-unicode-value": {"headers": {"X-Note": "Grüße 🎉 \u2027 \u00a0"}},
    "header-empty-value": {"headers": {"X-Empty": ""}},
    "attachment-unicode-filename": {"attachments": [{**ATTACHMENT, "filename": "résumé 履歴書 🎉.txt"}]},
    "attachment-empty-file": {"attachments": [{**ATTACHMENT, "content_base64": ""}]},
    "two-attachments": {"attachments": [ATTACHMENT, {**ATTACHMENT, "filename": "b.pdf",
                                                     "content_type": "application/pdf"}]},
}


# -- inserting: psql (any language's client) and asyncpg -------------------------------------


def sql_literal(value: Any, column: str) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, list) and column.endswith("_addresses"):
        return "ARRAY[" + ", ".join(sql_literal(v, "") for v in value) + "]::text[]"
    if isinstance(value, (dict, list)):
        return sql_literal(json.dumps(value), "") + "::jsonb"  # JSON escapes (\r as \u000d), as apps send them
    escaped = "".join(f"\\u{ord(c):04x}" if find_control_character(c) or c in "\\'" else c for c in value)
    return f"E'{escaped}'"


def insert_statement(key: str, cols: dict[str, Any]) -> str:
    row = {"dedupe_key": key, **GOOD, **cols}
    return (f"INSERT INTO email_deliveries ({', '.join(row)}) "
            f"VALUES ({', '.join(sql_literal(v, c) for c, v in row.items())})")


def psql(url: str, statement: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["psql", "-X", "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose", url, "-c", statement],
                          capture_output=True, text=True, timeout=60)


async def asyncpg_insert(conn: asyncpg.Connection, key: str, cols: dict[str, Any]) -> None:
    row = {"dedupe_key": key, **GOOD, **cols}
    casts = {c: "::jsonb" for c in ("headers", "attachments", "metadata")}
    values = [json.dumps(v) if c in casts else v for c, v in row.items()]
    placeholders = ", ".join(f"${i}{casts.get(c, '')}" for i, c in enumerate(row, start=1))
    await conn.execute(f"INSERT INTO email_deliveries ({', '.join(row)}) VALUES ({placeholders})", *values)


@pytest.fixture(scope="module")
def matrix_db(pg_server: str, template_db: str) -> Iterator[str]:
    """One database for every case of the matrices (a fresh clone per case took ~0.5 s)."""
    with cloned_database(pg_server, template_db) as url:
        yield url


@pytest.fixture
async def conn(matrix_db: str) -> AsyncIterator[asyncpg.Connection]:
    """To the matrices' database, emptied first (queue entries go with their rows: ON DELETE CASCADE)."""
    c = await asyncpg.connect(matrix_db)
    await c.execute("DELETE FROM email_deliveries")
    yield c
    await c.close()


# -- refused at INSERT ------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_psql_insert_is_refused_with_the_constraint_named(matrix_db: str, case: str) -> None:
    cols, constraint, detail = REFUSED[case]
    result = psql(matrix_db, insert_statement(case, cols))
    assert result.returncode != 0, f"{case} was accepted"
    assert "ERROR:  23514:" in result.stderr, result.stderr
    assert f'violates check constraint "{constraint}"' in result.stderr, result.stderr
    assert f"CONSTRAINT NAME:  {constraint}" in result.stderr, result.stderr
    assert detail in result.stderr, result.stderr


@pytest.mark.parametrize("case", sorted(REFUSED))
async def test_asyncpg_insert_is_refused_in_the_transaction(conn: asyncpg.Connection, case: str) -> None:
    cols, constraint, detail = REFUSED[case]
    async with conn.transaction():
        await asyncpg_insert(conn, "before", {})
        with pytest.raises(asyncpg.CheckViolationError) as raised:
            async with conn.transaction():  # a savepoint: the application's own transaction goes on
                await asyncpg_insert(conn, case, cols)
    assert raised.value.constraint_name == constraint
    assert raised.value.table_name == "email_deliveries"
    assert detail in raised.value.detail
    assert await conn.fetchval("SELECT count(*) FROM email_deliveries") == 1
    assert await conn.fetchval("SELECT count(*) FROM email_queue") == 1


async def test_a_refused_row_rolls_back_the_applications_transaction(conn: asyncpg.Connection) -> None:
    with pytest.raises(asyncpg.CheckViolationError):
        async with conn.transaction():
            await conn.execute("CREATE TABLE orders (id int)")
            await conn.execute("INSERT INTO orders VALUES (1)")
            await asyncpg_insert(conn, "order-1", REFUSED["subject-crlf-bcc"][0])
    assert await conn.fetchval("SELECT to_regclass('orders')") is None
    assert await conn.fetchval("SELECT count(*) FROM email_deliveries") == 0


async def test_the_control_characters_are_exactly_the_daemons(conn: asyncpg.Connection) -> None:
    """Every code point PostgreSQL can store in text, judged by SQL and by the daemon's composer."""
    refused_by_sql = set(await conn.fetchval(
        "SELECT array_agg(i) FROM generate_series(1, 1114111) AS i "
        "WHERE i NOT BETWEEN 55296 AND 57343 AND email_deliveries_control_character(chr(i)) IS NOT NULL"))
    refused_by_daemon = {i for i in range(1, sys.maxunicode + 1)
                         if not 0xD800 <= i <= 0xDFFF and find_control_character(chr(i)) is not None}
    assert refused_by_sql == refused_by_daemon


async def test_header_names_are_judged_as_the_daemon_judges_them(conn: asyncpg.Connection) -> None:
    from outbox_mailer.message.header_fields import FIELD_NAME  # the daemon's rule for a header name

    for i in [*range(1, 256), 0x2028, 0x3000, 0x1F389]:
        name = f"X-{chr(i)}"
        try:
            async with conn.transaction():
                await asyncpg_insert(conn, f"name-{i}", {"headers": {name: "v"}})
            accepted = True
        except asyncpg.CheckViolationError as exc:
            assert exc.constraint_name == "email_deliveries_header_names_valid", (i, exc)
            accepted = False
        assert accepted == bool(FIELD_NAME.fullmatch(name)), hex(i)


async def test_an_update_writing_a_hostile_value_is_refused(conn: asyncpg.Connection) -> None:
    await asyncpg_insert(conn, "edited", {})
    for statement, constraint in [
        ("UPDATE email_deliveries SET subject = E'a\\r\\nBcc: x@example.net'", "email_deliveries_subject_no_control_chars"),
        ("UPDATE email_deliveries SET from_address = E'a@example.com\\n'", "email_deliveries_from_address_no_control_chars"),
        ("UPDATE email_deliveries SET reply_to = E'a@example.com\\n'", "email_deliveries_reply_to_no_control_chars"),
        ("UPDATE email_deliveries SET bcc_addresses = ARRAY[E'a@example.com\\n']",
         "email_deliveries_bcc_addresses_no_control_chars"),
        ("UPDATE email_deliveries SET headers = '{\"X-A\": \"a\\u000d\"}'", "email_deliveries_header_values_no_control_chars"),
        ("UPDATE email_deliveries SET attachments = '[{\"filename\": \"a\"}]'", "email_deliveries_attachments_entries_keys"),
    ]:
        with pytest.raises(asyncpg.CheckViolationError) as raised:
            await conn.execute(statement)
        assert raised.value.constraint_name == constraint, statement


# -- accepted: what SQL cannot judge, and legitimate odd rows -----------------------------------


@pytest.mark.parametrize("case", sorted({**DAEMON_FAILS, **SENT}))
def test_psql_accepts_what_sql_cannot_judge_and_odd_legitimate_rows(matrix_db: str, case: str) -> None:
    cols = DAEMON_FAILS[case][0] if case in DAEMON_FAILS else SENT[case]
    result = psql(matrix_db, insert_statement(case, cols))
    assert result.returncode == 0, result.stderr


async def test_rows_sql_cannot_judge_are_failed_by_the_daemon_naming_the_field(
    own_conn: asyncpg.Connection, store: SqlStore, running: Any, smtp_server: SmtpTestServer
) -> None:
    for case, (cols, _) in DAEMON_FAILS.items():
        await asyncpg_insert(own_conn, case, cols)
    await asyncpg_insert(own_conn, "fine", {})
    r = await running()
    rows = await r.final(*DAEMON_FAILS, "fine")
    for case, (_, field) in DAEMON_FAILS.items():
        assert rows[case]["status"] == "failed", (case, rows[case])
        assert field in rows[case]["last_error"], (case, rows[case]["last_error"])
    assert rows["fine"]["status"] == "sent"
    assert_nothing_injected(smtp_server, expected_messages=1)


async def test_legitimate_odd_rows_insert_and_are_sent(
    own_conn: asyncpg.Connection, running: Any, smtp_server: SmtpTestServer
) -> None:
    for case, cols in SENT.items():
        await asyncpg_insert(own_conn, case, cols)
    r = await running()
    rows = await r.final(*SENT)
    assert {k: (v["status"], v["last_error"]) for k, v in rows.items() if v["status"] != "sent"} == {}
    assert_nothing_injected(smtp_server, expected_messages=len(SENT))


def assert_nothing_injected(server: SmtpTestServer, expected_messages: int) -> None:
    messages = server.messages
    assert len(messages) == expected_messages
    for m in messages:
        assert all("victim" not in rcpt for rcpt in m.rcpt_tos), m.rcpt_tos
        head = m.data.split(b"\r\n\r\n", 1)[0].lower()
        assert b"victim" not in m.data.lower(), head
        assert INJECTED.lower().encode() not in head, head
        assert b"\nbcc:" not in head, head
    for _, verb, arg in server.commands:
        assert "victim" not in arg.lower(), (verb, arg)
