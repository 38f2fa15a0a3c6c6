"""The schema after every migration, as ``pg_dump --schema-only`` writes it: ``sql/dump/schema.sql``.

``python -m tests.schema_dump --write`` starts a throwaway PostgreSQL (or uses the server of
``OUTBOX_MAILER_TEST_DATABASE_URL``), migrates a fresh database with the migrations of this checkout,
dumps it and writes the file; without ``--write`` it only compares and prints a unified diff.
``tests/integration/test_schema_file.py`` does the same comparison in the suite.

The dump is made deterministic: the lines that change from run to run (the ``\\restrict`` and
``\\unrestrict`` lines, whose key pg_dump draws at random, and the version comments) are left out.
"""

from __future__ import annotations

import argparse
import difflib
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import anyio
import psycopg

from outbox_mailer.devtools.pgcluster import TemporaryPostgres, find_bindir
from outbox_mailer.store import Store
from outbox_mailer.store.migrations import load_migrations

SCHEMA_FILE = Path(__file__).resolve().parent.parent / "sql" / "dump" / "schema.sql"
REGENERATE = "python -m tests.schema_dump --write"
HEADER = f"""\
-- The schema of outbox-mailer after every migration in sql/, as pg_dump --schema-only (PostgreSQL 15) writes it.
-- Generated: do not edit; regenerate with `{REGENERATE}` after adding a migration.
-- For reading only: never apply this file, with outbox-mailer migrate or any migration tool;
-- the schema is the numbered migrations in sql/.
"""
# lines that differ between two runs of pg_dump on the same schema
_VARYING = ("\\restrict ", "\\unrestrict ", "-- Dumped from database version", "-- Dumped by pg_dump version")


def pg_dump() -> str:
    """The pg_dump of the server binaries the suite runs (PostgreSQL 15), else the one on PATH."""
    bindir = find_bindir()
    found = str(bindir / "pg_dump") if bindir is not None and (bindir / "pg_dump").exists() else shutil.which("pg_dump")
    if found is None:
        raise FileNotFoundError("pg_dump not found (PostgreSQL client binaries)")
    return found


def dump_schema(url: str) -> str:
    """The database's schema as the committed file holds it: header, then the dump without varying lines."""
    out = subprocess.run([pg_dump(), "--schema-only", "--no-owner", "--no-privileges", "--dbname", url],
                         capture_output=True, text=True, check=True, timeout=120)
    kept: list[str] = []
    dropped = False  # a varying line was just left out: so is the blank line after it
    for line in out.stdout.splitlines():
        if not line.startswith(_VARYING) and not (dropped and not line):
            kept.append(line)
        dropped = line.startswith(_VARYING)
    return HEADER + "\n" + "\n".join(kept).strip("\n") + "\n"


async def migrate(url: str) -> None:
    store = await Store.open(url)
    try:
        await store.migrate(load_migrations())
    finally:
        await store.close()


def migrated_schema(url: str) -> str:
    """Migrate the (empty) database at ``url`` to the current schema and return its dump."""
    anyio.run(migrate, url)
    return dump_schema(url)


def difference(committed: str, current: str) -> str:
    """A unified diff from the committed file to the current schema ('' when they are equal)."""
    return "".join(difflib.unified_diff(committed.splitlines(keepends=True), current.splitlines(keepends=True),
                                        fromfile=f"{SCHEMA_FILE.name} (committed)", tofile="migrated database"))


def _on_server(server: str) -> str:
    """The current schema, dumped from a fresh database created (and dropped) on ``server``."""
    name = "schema_dump_" + uuid.uuid4().hex[:12]
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")  # type: ignore[arg-type]  (a generated name, no parameters)
        try:
            return migrated_schema(urlunsplit(urlsplit(server)._replace(path="/" + name)))
        finally:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")  # type: ignore[arg-type]  (as above)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.schema_dump", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write {SCHEMA_FILE.name} instead of comparing")
    args = parser.parse_args(argv)
    external = os.environ.get("OUTBOX_MAILER_TEST_DATABASE_URL")
    if external:
        current = _on_server(external)
    else:
        with TemporaryPostgres() as cluster:
            current = _on_server(cluster.url)
    if args.write:
        SCHEMA_FILE.parent.mkdir(exist_ok=True)
        SCHEMA_FILE.write_text(current, encoding="utf-8")
        return 0
    diff = difference(SCHEMA_FILE.read_text(encoding="utf-8") if SCHEMA_FILE.exists() else "", current)
    sys.stdout.write(diff or f"{SCHEMA_FILE.name} is current\n")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
