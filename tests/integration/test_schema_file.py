"""``sql/dump/schema.sql`` is the schema the migrations build, and the README's contract table names it truly."""

from __future__ import annotations

import re
from pathlib import Path

from outbox_mailer.store.migrations import load_migrations, migrations_dir
from tests.schema_dump import REGENERATE, SCHEMA_FILE, difference, migrated_schema

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_schema_file_is_the_dump_of_a_freshly_migrated_database(empty_db_url: str) -> None:
    committed = SCHEMA_FILE.read_text(encoding="utf-8") if SCHEMA_FILE.exists() else ""
    diff = difference(committed, migrated_schema(empty_db_url))
    assert not diff, f"{SCHEMA_FILE.relative_to(ROOT)} is not the migrated schema; regenerate: {REGENERATE}\n{diff}"


def test_the_schema_file_is_neither_loaded_nor_globbed_as_a_migration() -> None:
    assert SCHEMA_FILE.exists()
    assert Path(str(migrations_dir())).resolve() == SCHEMA_FILE.parent.parent
    loaded = load_migrations()  # refuses a stray *.sql beside the migrations
    assert all(re.fullmatch(r"\d{4}_[a-z0-9_]+\.sql", m.name) for m in loaded)
    assert SCHEMA_FILE not in SCHEMA_FILE.parent.parent.glob("*.sql")  # the README's "apply sql/*.sql"
    assert "never apply this file" in SCHEMA_FILE.read_text(encoding="utf-8").split("\n\n")[0]
