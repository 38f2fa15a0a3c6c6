"""Inline attachments (schema 23, sql/0023_inline_attachments.sql): content_id checked at INSERT,
judged by SQL as the daemon judges it, and sent to a real SMTP server as a multipart/related part."""

from __future__ import annotations

import base64
from email.message import EmailMessage
from email.parser import BytesParser
from email.policy import default as default_policy
from typing import Any

import asyncpg
import pytest

from outbox_mailer.errors import CompositionError
from outbox_mailer.message.compose import compose
from tests.integration.test_refused_at_insert import asyncpg_insert
from tests.smtp_server import SmtpTestServer
from tests.unit.test_compose import NOW, make_delivery

pytestmark = pytest.mark.anyio

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
LOGO = {"filename": "logo.png", "content_type": "image/png", "content_base64": base64.b64encode(PNG).decode(),
        "content_id": "logo.1@shop.example"}
FILE = {"filename": "a.txt", "content_type": "text/plain", "content_base64": "aGVsbG8="}
HTML = '<p>Hello</p><img src="cid:logo.1@shop.example">'

# id: (attachments, constraint, DETAIL fragment)
REFUSED: dict[str, tuple[list[Any], str, str]] = {
    "crlf": ([FILE, {**LOGO, "content_id": "logo\r\nBcc: victim@example.net"}],
             "email_deliveries_attachments_content_id_valid", "attachments[1].content_id holds the control character U+000D"),
    "angle-brackets": ([{**LOGO, "content_id": "<logo@shop.example>"}], "email_deliveries_attachments_content_id_valid",
                       'attachments[0].content_id "<logo@shop.example>": write the id without angle brackets'),
    "space": ([{**LOGO, "content_id": "logo png"}], "email_deliveries_attachments_content_id_valid",
              'attachments[0].content_id "logo png": 1-250 letters, digits'),
    "two-ats": ([{**LOGO, "content_id": "a@b@c"}], "email_deliveries_attachments_content_id_valid",
                'attachments[0].content_id "a@b@c": 1-250'),
    "empty-right": ([{**LOGO, "content_id": "logo@"}], "email_deliveries_attachments_content_id_valid",
                    'attachments[0].content_id "logo@"'),
    "empty": ([{**LOGO, "content_id": ""}], "email_deliveries_attachments_content_id_valid",
              'attachments[0].content_id ""'),
    "too-long": ([{**LOGO, "content_id": "x" * 251}], "email_deliveries_attachments_content_id_valid",
                 "attachments[0].content_id"),
    "non-ascii": ([{**LOGO, "content_id": "lögo@shop.example"}], "email_deliveries_attachments_content_id_valid",
                  'attachments[0].content_id "lögo@shop.example"'),
    "number": ([{**LOGO, "content_id": 7}], "email_deliveries_attachments_entries_strings",
               "attachments[0].content_id is a JSON number, not a string"),
    "duplicate": ([LOGO, FILE, {**LOGO, "filename": "again.png"}], "email_deliveries_attachments_content_id_unique",
                  'attachments[2].content_id "logo.1@shop.example" is also attachments[0]\'s'),
    "unknown-key-still-refused": ([{**LOGO, "disposition": "inline"}], "email_deliveries_attachments_entries_keys",
                                  'attachments[0] has unknown keys: "disposition"'),
}

ACCEPTED: dict[str, list[Any]] = {
    "addr-spec": [LOGO],
    "no-at": [{**LOGO, "content_id": "logo"}],
    "punctuation": [{**LOGO, "content_id": "a.b!#$%&'*+/=?^_`{|}~-@x.y"}],
    "250-chars": [{**LOGO, "content_id": "x" * 250}],
    "null": [{**LOGO, "content_id": None}],
    "with-a-file": [FILE, LOGO, {**LOGO, "content_id": "other@shop.example"}],
}


@pytest.mark.parametrize("case", sorted(REFUSED))
async def test_a_bad_content_id_is_refused_at_insert_naming_the_entry(own_conn: asyncpg.Connection, case: str) -> None:
    attachments, constraint, detail = REFUSED[case]
    with pytest.raises(asyncpg.CheckViolationError) as raised:
        await asyncpg_insert(own_conn, case, {"html_body": HTML, "attachments": attachments})
    assert raised.value.constraint_name == constraint
    assert detail in raised.value.detail


async def test_good_content_ids_are_accepted_and_an_update_writing_a_bad_one_is_refused(
        own_conn: asyncpg.Connection) -> None:
    for case, attachments in ACCEPTED.items():
        await asyncpg_insert(own_conn, case, {"html_body": HTML, "attachments": attachments})
    assert await own_conn.fetchval("SELECT count(*) FROM email_deliveries") == len(ACCEPTED)
    with pytest.raises(asyncpg.CheckViolationError) as raised:
        await own_conn.execute("""UPDATE email_deliveries SET attachments = '[{"filename": "a", "content_type": "a/b",
                              "content_base64": "", "content_id": "<x>"}]' WHERE dedupe_key = 'null'""")
    assert raised.value.constraint_name == "email_deliveries_attachments_content_id_valid"


async def test_sql_judges_a_content_id_as_the_daemon_does(own_conn: asyncpg.Connection) -> None:
    candidates = [chr(i) for i in [*range(1, 128), 0xA0, 0xE9, 0x2028, 0x1F389]]
    candidates += [f"a{c}b" for c in candidates] + [f"a@{c}" for c in candidates] + ["a@b@c", "@", "a@", "@b", "a.b@c.d"]
    for index, content_id in enumerate(candidates):
        try:
            async with own_conn.transaction():
                await asyncpg_insert(own_conn, f"cid-{index}", {"attachments": [{**FILE, "content_id": content_id}]})
            by_sql = True
        except asyncpg.CheckViolationError as exc:
            assert exc.constraint_name == "email_deliveries_attachments_content_id_valid", (content_id, exc)
            by_sql = False
        try:
            compose(make_delivery(attachments=[{**FILE, "content_id": content_id}]), default_from=None,
                    max_message_bytes=1_000_000, now=NOW)
            by_daemon = True
        except CompositionError as exc:
            assert exc.field == "attachments[0].content_id", (content_id, exc)
            by_daemon = False
        assert by_sql == by_daemon, repr(content_id)


async def test_a_real_smtp_server_receives_the_html_related_to_its_inline_image(
        own_conn: asyncpg.Connection, running: Any, smtp_server: SmtpTestServer) -> None:
    await asyncpg_insert(own_conn, "inline", {"text_body": "Hello", "html_body": HTML, "attachments": [LOGO, FILE]})
    rows = await (await running()).final("inline")
    assert rows["inline"]["status"] == "sent", rows["inline"]["last_error"]
    [received] = smtp_server.messages
    message = BytesParser(policy=default_policy).parsebytes(received.data)
    assert isinstance(message, EmailMessage)
    related = next(p for p in message.walk() if p.get_content_type() == "multipart/related")
    html, image = related.iter_parts()
    assert html.get_content_type() == "text/html" and "cid:logo.1@shop.example" in html.get_content()  # type: ignore[attr-defined]  # a leaf part of an EmailMessage
    assert image["Content-ID"] == "<logo.1@shop.example>"
    assert image.get_content_disposition() == "inline"
    assert image.get_content() == PNG  # type: ignore[attr-defined]  # a leaf part of an EmailMessage
    assert [p.get_content_type() for p in message.iter_parts()] == ["multipart/alternative", "text/plain"]
