"""Loads the named SQL blocks of ``queries.sql`` (and the console's, ``console_queries.sql``) once, at import.

A block is ``-- name: <name>`` then a ``-- <description>`` line, then the
statement. ``QUERIES["claim_due"]`` is the SQL text; names match the Store
methods that run them. A ``-- fragment: <name>`` block is a piece of SQL that
statements share (a column list said once); a line ``-- include: <name>`` in a
statement stands for it.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import NamedTuple

_NAME = re.compile(r"^-- (name|fragment): ([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_INCLUDE = re.compile(r"^\s*-- include: ([a-z_][a-z0-9_]*)\s*$")


class Query(NamedTuple):
    name: str
    description: str
    sql: str


def parse_queries(text: str) -> dict[str, Query]:
    """Split the file into named blocks; refuse duplicates, blocks without a statement and unknown includes."""
    blocks: dict[str, tuple[str, str, list[str]]] = {}  # name -> (kind, description, lines)
    matches = list(_NAME.finditer(text))
    for i, match in enumerate(matches):
        kind, name = match.group(1), match.group(2)
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        lines = text[match.end() : end].strip("\n").splitlines()
        if not lines or not lines[0].startswith("-- "):
            raise ValueError(f"query {name!r} has no description line")
        if name in blocks:
            raise ValueError(f"query {name!r} is defined twice")
        blocks[name] = (kind, lines[0][3:].strip(), lines[1:])
    fragments: dict[str, str] = {}  # a fragment may include the fragments defined above it
    for n, (kind, _, lines) in blocks.items():
        if kind == "fragment":
            fragments[n] = _statement(n, lines, fragments)
    return {n: Query(n, description, _statement(n, lines, fragments).rstrip(";"))
            for n, (kind, description, lines) in blocks.items() if kind == "name"}


def _statement(name: str, lines: list[str], fragments: dict[str, str]) -> str:
    out = []
    for line in lines:
        include = _INCLUDE.match(line)
        if include:
            if include.group(1) not in fragments:
                raise ValueError(f"query {name!r} includes an unknown fragment {include.group(1)!r}")
            out.append(fragments[include.group(1)])
        elif not line.startswith("--"):
            out.append(line)
    sql = "\n".join(out).strip()
    if not sql:
        raise ValueError(f"query {name!r} has no statement")
    return sql


def _load(*files: str) -> dict[str, Query]:
    queries: dict[str, Query] = {}
    for name in files:
        more = parse_queries(resources.files(__package__).joinpath(name).read_text("utf-8"))
        if twice := sorted(queries.keys() & more.keys()):
            raise ValueError(f"query {twice[0]!r} is defined in {name} and before it")
        queries.update(more)
    return queries


QUERIES: dict[str, Query] = _load("queries.sql", "console_queries.sql")


def sql(name: str) -> str:
    return QUERIES[name].sql
