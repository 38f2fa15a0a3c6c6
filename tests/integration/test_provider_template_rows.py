"""Rows that name a provider's own template (schema 29, sql/0029_provider_templates.sql): a row gives its own
subject and body, a stored template, or a provider template, exactly one; the name is 1-255 characters without
control characters; ``template_data`` is the template's model (an object, or null for none)."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from tests.integration.test_template_rows import scrubbed_when_two_days_old

pytestmark = pytest.mark.anyio

ROW = """INSERT INTO email_deliveries (dedupe_key, to_addresses, provider_template, template_data, subject,
                                      text_body, template, locale)
         VALUES ($1, ARRAY['ann@example.com'], $2, $3::jsonb, $4, $5, $6, $7)"""


async def insert(conn: asyncpg.Connection, key: str, provider_template: str | None, data: str | None = None,
                 **content: Any) -> None:
    await conn.execute(ROW, key, provider_template, data, content.get("subject"), content.get("text_body"),
                       content.get("template"), content.get("locale"))


async def refused(conn: asyncpg.Connection, key: str, provider_template: str | None, **kw: Any) -> str | None:
    with pytest.raises(asyncpg.CheckViolationError) as raised:
        await insert(conn, key, provider_template, **kw)
    return raised.value.constraint_name


async def test_a_row_naming_a_provider_template_needs_no_subject_nor_body_and_may_omit_its_model(
        own_conn: asyncpg.Connection) -> None:
    await insert(own_conn, "with-model", "welcome-v2", '{"name": "Ann"}')
    await insert(own_conn, "no-model", "d-0123456789abcdef")
    rows = {r["dedupe_key"]: r for r in await own_conn.fetch(
        "SELECT dedupe_key, provider_template, template_data::text AS model, subject, status FROM email_deliveries")}
    assert rows["with-model"]["provider_template"] == "welcome-v2"
    assert rows["with-model"]["model"] == '{"name": "Ann"}' and rows["no-model"]["model"] is None
    assert {r["subject"] for r in rows.values()} == {None} and {r["status"] for r in rows.values()} == {"pending"}


async def test_a_provider_template_with_own_content_or_a_stored_template_or_a_locale_is_refused(
        own_conn: asyncpg.Connection) -> None:
    await own_conn.execute("INSERT INTO email_templates (name, locale, version, subject, text_body, created_by) "
                           "VALUES ('welcome', 'en', 1, 'Hi', 'body', 'test')")
    assert await refused(own_conn, "subject", "welcome-v2", subject="Hi") == "email_deliveries_content_or_template"
    assert await refused(own_conn, "body", "welcome-v2", text_body="b") == "email_deliveries_content_or_template"
    assert await refused(own_conn, "both", "welcome-v2", template="welcome") == "email_deliveries_content_or_template"
    assert await refused(own_conn, "locale", "welcome-v2", locale="en") == "email_deliveries_content_or_template"
    assert await refused(own_conn, "array", "welcome-v2", data="[1]") == "email_deliveries_template_data_object"


@pytest.mark.parametrize("name", ["", "x" * 256, "alias\nBcc: x"])
async def test_an_empty_overlong_or_control_character_provider_template_name_is_refused(
        own_conn: asyncpg.Connection, name: str) -> None:
    assert await refused(own_conn, "bad-name", name) == "email_deliveries_provider_template_valid"


async def test_an_update_giving_a_provider_template_row_a_subject_is_refused(own_conn: asyncpg.Connection) -> None:
    await insert(own_conn, "row", "welcome-v2")
    with pytest.raises(asyncpg.CheckViolationError) as raised:
        await own_conn.execute("UPDATE email_deliveries SET subject = 'Hi' WHERE dedupe_key = 'row'")
    assert raised.value.constraint_name == "email_deliveries_content_or_template"
    with pytest.raises(asyncpg.CheckViolationError) as raised:
        await own_conn.execute("UPDATE email_deliveries SET provider_template = '' WHERE dedupe_key = 'row'")
    assert raised.value.constraint_name == "email_deliveries_provider_template_valid"


async def test_retention_scrubs_a_provider_template_rows_model_to_an_empty_object(
        own_conn: asyncpg.Connection, db_url: str) -> None:
    await insert(own_conn, "old", "welcome-v2", '{"iban": "DE00 1234"}')
    assert await scrubbed_when_two_days_old(own_conn, db_url) == 1
    row = await own_conn.fetchrow("SELECT text_body, template_data::text AS model, provider_template "
                                  "FROM email_deliveries")
    assert row is not None and tuple(row) == (None, "{}", "welcome-v2")
