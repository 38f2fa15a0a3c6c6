"""The schema as ordered, forward-only SQL files (``sql/NNNN_name.sql``).

They ship inside the wheel as ``outbox_mailer/migrations``; in a source
checkout they are read from the top-level ``sql/`` directory. This module only
finds and checks them; :meth:`outbox_mailer.store.Store.migrate` applies them.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()


def migrations_dir() -> Traversable:
    packaged = resources.files("outbox_mailer").joinpath("migrations")
    if packaged.is_dir():
        return packaged
    source = Path(__file__).resolve().parents[2] / "sql"
    if source.is_dir():
        return source
    raise FileNotFoundError("no migrations found (neither outbox_mailer/migrations nor ../sql)")


def load_migrations(directory: Traversable | None = None) -> list[Migration]:
    """All migrations in version order; refuses gaps, duplicates and stray names."""
    directory = directory or migrations_dir()
    found: list[Migration] = []
    for entry in directory.iterdir():
        if not entry.name.endswith(".sql"):
            continue
        match = _FILE.match(entry.name)
        if match is None:
            raise ValueError(f"migration file {entry.name!r} is not named NNNN_name.sql")
        found.append(Migration(int(match.group(1)), entry.name, entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    for expected, migration in enumerate(found, start=1):
        if migration.version != expected:
            raise ValueError(f"migration versions must be 1..N without gaps; found {migration.name} at {expected}")
    return found


def expected_schema_version() -> int:
    return len(load_migrations())
