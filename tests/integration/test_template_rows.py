"""Stored templates and the rows that name them (schema 27, sql/0027_templates.sql): versions are immutable,
the INSERT resolves the version in force through the locale chain and records it, a row gives its own content
or a template, never both, and an unknown template is refused at INSERT with its name."""

from __future__ import annotations

import asyncpg
import pytest

from outbox_mailer.store import Store

pytestmark = pytest.mark.anyio

ADD = """INSERT INTO email_templates (name, locale, version, subject, text_body, created_by)
         SELECT $1, $2, coalesce(max(version), 0) + 1, $3, $4, 'test' FROM email_templates
         WHERE name = $1 AND locale = $2"""
ROW = """INSERT INTO email_deliveries (dedupe_key, to_addresses, template, template_data, locale, template_version)
         VALUES ($1, ARRAY['ann@example.com'], $2, $3::jsonb, $4, $5)
         RETURNING locale, template_version"""


async def add(conn: asyncpg.Connection, name: str, locale: str, subject: str, text: str = "body") -> None:
    await conn.execute(ADD, name, locale, subject, text)


async def resolved(conn: asyncpg.Connection, key: str, template: str, locale: str | None = None,
                   version: int | None = None, data: str | None = '{"name": "Ann"}') -> tuple[str, int]:
    row = await conn.fetchrow(ROW, key, template, data, locale, version)
    assert row is not None
    return row["locale"], row["template_version"]


async def scrubbed_when_two_days_old(conn: asyncpg.Connection, db_url: str) -> int:
    """Every row made sent two days ago, then one retention batch at a day: how many rows it scrubbed."""
    await conn.execute("UPDATE email_deliveries SET status = 'sent', sent_at = now(), "
                       "created_at = now() - interval '2 days', updated_at = now() - interval '2 days'")
    store = await Store.open(db_url)
    try:
        return await store.scrub_batch(86_400, 10)
    finally:
        await store.close()


async def test_adding_under_a_name_and_locale_adds_a_version_and_a_version_never_changes(
        own_conn: asyncpg.Connection) -> None:
    await add(own_conn, "welcome", "en", "Hello v1")
    await add(own_conn, "welcome", "en", "Hello v2")
    versions = await own_conn.fetch("SELECT version, subject FROM email_templates ORDER BY version")
    assert [tuple(v) for v in versions] == [(1, "Hello v1"), (2, "Hello v2")]
    with pytest.raises(asyncpg.CheckViolationError) as raised:
        await own_conn.execute("UPDATE email_templates SET subject = 'changed' WHERE version = 1")
    assert raised.value.constraint_name == "email_templates_immutable"
    with pytest.raises(asyncpg.CheckViolationError):
        await own_conn.execute("DELETE FROM email_templates")
    assert await own_conn.fetchval("SELECT subject FROM email_templates WHERE version = 1") == "Hello v1"


async def test_the_insert_pins_the_latest_version_and_a_later_version_does_not_move_the_row(
        own_conn: asyncpg.Connection) -> None:
    await add(own_conn, "welcome", "en", "v1")
    assert await resolved(own_conn, "first", "welcome") == ("en", 1)
    await add(own_conn, "welcome", "en", "v2")
    assert await resolved(own_conn, "second", "welcome") == ("en", 2)
    assert await own_conn.fetchval("SELECT template_version FROM email_deliveries WHERE dedupe_key = 'first'") == 1
    assert await resolved(own_conn, "pinned", "welcome", version=1) == ("en", 1)


async def test_the_locale_falls_back_from_region_to_language_to_the_templates_default(
        own_conn: asyncpg.Connection) -> None:
    await add(own_conn, "welcome", "en", "Hello")  # the first locale added: the default
    await add(own_conn, "welcome", "pt", "Olá")
    await add(own_conn, "welcome", "pt-BR", "Oi")
    assert await resolved(own_conn, "exact", "welcome", "pt-BR") == ("pt-BR", 1)
    assert await resolved(own_conn, "language", "welcome", "pt-PT") == ("pt", 1)
    assert await resolved(own_conn, "default", "welcome", "de-AT") == ("en", 1)
    assert await resolved(own_conn, "none-asked", "welcome") == ("en", 1)


async def test_a_row_naming_an_unknown_template_or_version_is_refused_at_insert_with_its_name(
        own_conn: asyncpg.Connection) -> None:
    with pytest.raises(asyncpg.CheckViolationError, match='no template named "no-such-template"') as raised:
        await resolved(own_conn, "unknown", "no-such-template")
    assert raised.value.constraint_name == "email_deliveries_template_known"
    await add(own_conn, "welcome", "en", "Hello")
    with pytest.raises(asyncpg.CheckViolationError, match='"welcome" has no version 7'):
        await resolved(own_conn, "no-version", "welcome", version=7)


async def test_a_row_gives_its_own_content_or_a_template_never_both_nor_neither(own_conn: asyncpg.Connection) -> None:
    await add(own_conn, "welcome", "en", "Hello")
    both = """INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, template)
              VALUES ('both', ARRAY['ann@example.com'], 'Hi', 'body', 'welcome')"""
    neither = """INSERT INTO email_deliveries (dedupe_key, to_addresses, text_body)
                 VALUES ('neither', ARRAY['ann@example.com'], 'body')"""
    data_alone = """INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, template_data)
                    VALUES ('data-alone', ARRAY['ann@example.com'], 'Hi', 'body', '{}')"""
    for statement, constraint in ((both, "email_deliveries_content_or_template"),
                                  (neither, "email_deliveries_has_subject"),
                                  (data_alone, "email_deliveries_content_or_template")):
        with pytest.raises(asyncpg.CheckViolationError) as raised:
            await own_conn.execute(statement)
        assert raised.value.constraint_name == constraint
    with pytest.raises(asyncpg.CheckViolationError) as raised:
        await resolved(own_conn, "array-data", "welcome", data="[1, 2]")
    assert raised.value.constraint_name == "email_deliveries_template_data_object"
    assert await resolved(own_conn, "no-data", "welcome", data=None) == ("en", 1)
    assert await own_conn.fetchval("SELECT template_data FROM email_deliveries WHERE dedupe_key = 'no-data'") == "{}"


async def test_an_update_naming_a_version_that_does_not_exist_is_refused(own_conn: asyncpg.Connection) -> None:
    await add(own_conn, "welcome", "en", "Hello")
    await resolved(own_conn, "row", "welcome")
    with pytest.raises(asyncpg.CheckViolationError) as raised:
        await own_conn.execute("UPDATE email_deliveries SET template_version = 9 WHERE dedupe_key = 'row'")
    assert raised.value.constraint_name == "email_deliveries_template_known"


async def test_retention_scrubs_a_template_rows_data_with_the_bodies(own_conn: asyncpg.Connection, db_url: str) -> None:
    await add(own_conn, "welcome", "en", "Hello")
    await resolved(own_conn, "old-template", "welcome", data='{"iban": "DE00 1234"}')
    await own_conn.execute("INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body) "
                           "VALUES ('old-plain', ARRAY['ann@example.com'], 'Hi', 'secret body')")
    assert await scrubbed_when_two_days_old(own_conn, db_url) == 2
    rows = {r["dedupe_key"]: r for r in await own_conn.fetch(
        "SELECT dedupe_key, text_body, template_data FROM email_deliveries")}
    assert (rows["old-template"]["text_body"], rows["old-template"]["template_data"]) == (None, "{}")
    assert (rows["old-plain"]["text_body"], rows["old-plain"]["template_data"]) == ("", None)
