"""The README's contract table against ``sql/dump/schema.sql`` (itself checked against a migrated
database by ``tests/integration/test_schema_file.py``): every column it names exists, with the type
and nullability it states, and every column of ``email_deliveries`` is either in it or in the short
list of the daemon's own columns in ``docs/architecture.md``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.schema_dump import SCHEMA_FILE

ROOT = Path(__file__).resolve().parents[2]
CONTRACT_HEADING = "## The table: the contract for every language"
INTERNAL_HEADING = "## Columns outside the contract"
# the README's words for a type, as pg_dump writes it
_TYPES = {"bigint": "bigint", "smallint": "smallint", "int": "integer", "text[]": "text[]", "text": "text",
          "jsonb": "jsonb", "timestamptz": "timestamp with time zone", "boolean": "boolean", "uuid": "uuid"}
_TYPE_WORD = re.compile(r"(?<![\w-])(" + "|".join(re.escape(t) for t in sorted(_TYPES, key=len, reverse=True)) + r")(?!\w)")
_NULLABLE = re.compile(r"(?<!not )\bnull\b")


@dataclass(frozen=True)
class Column:
    type: str
    nullable: bool


def table_after(path: Path, heading: str) -> list[list[str]]:
    """The cells of the rows of the first Markdown table after ``heading`` (header row and rule left out)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = lines.index(heading)
    rows: list[list[str]] = []
    for line in lines[start + 1:]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif rows:
            break
    return rows[2:]


def names(cell: str) -> list[str]:
    return re.findall(r"`([a-z_]+)`", cell)


def dumped_columns(table: str) -> dict[str, Column]:
    """The columns of ``table`` in the committed dump's CREATE TABLE."""
    text = SCHEMA_FILE.read_text(encoding="utf-8")
    body = re.search(rf"^CREATE TABLE public\.{table} \(\n(.*?)\n\)", text, re.MULTILINE | re.DOTALL)
    assert body is not None, f"no CREATE TABLE {table} in {SCHEMA_FILE.name}"
    columns: dict[str, Column] = {}
    for line in body.group(1).splitlines():
        definition = line.strip().rstrip(",")
        if definition.startswith("CONSTRAINT "):
            continue
        name, _, rest = definition.partition(" ")
        kind = re.split(r" (?:DEFAULT|NOT NULL|GENERATED|COLLATE)\b", rest)[0]
        columns[name] = Column(kind, "NOT NULL" not in rest)
    return columns


def contract_columns() -> dict[str, Column]:
    """The README's table: for a row naming several columns, its type cell states one type for all,
    or one for each (``text null, timestamptz null``)."""
    found: dict[str, Column] = {}
    for cells in table_after(ROOT / "README.md", CONTRACT_HEADING):
        columns, kinds = names(cells[0]), cells[1].split(", ")
        stated = [part for part in kinds if _TYPE_WORD.match(part)]
        assert len(stated) in (1, len(columns)), f"README row {cells[0]}: types {cells[1]!r}"
        for name, part in zip(columns, stated * len(columns) if len(stated) == 1 else stated, strict=True):
            kind = _TYPE_WORD.match(part)
            assert kind is not None
            found[name] = Column(_TYPES[kind.group(1)], bool(_NULLABLE.search(part)))
    return found


def internal_columns() -> list[str]:
    return [name for cells in table_after(ROOT / "docs" / "architecture.md", INTERNAL_HEADING)
            for name in names(cells[0])]


def test_every_column_of_the_readme_contract_is_in_the_schema_with_its_stated_type() -> None:
    dumped, stated = dumped_columns("email_deliveries"), contract_columns()
    assert len(stated) > 20
    assert {name: dumped.get(name) for name in stated} == stated


def test_every_column_of_email_deliveries_is_in_the_contract_or_listed_as_the_daemons_own() -> None:
    internal = internal_columns()
    assert internal, "docs/architecture.md lists no internal column"
    assert not set(internal) & set(contract_columns()), "a column is both contract and internal"
    assert set(dumped_columns("email_deliveries")) == set(contract_columns()) | set(internal)
