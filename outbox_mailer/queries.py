"""Loads the named SQL blocks of ``queries.sql`` once, at import.

A block is ``-- name: <name>`` then a ``-- <description>`` line, then the
statement. ``QUERIES["claim_due"]`` is the SQL text; names match the Store
methods that run them.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import NamedTuple

_NAME = re.compile(r"^-- name: ([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


class Query(NamedTuple):
    name: str
    description: str
    sql: str


def parse_queries(text: str) -> dict[str, Query]:
    """Split the file into named blocks; refuse duplicates and blocks without a statement."""
    queries: dict[str, Query] = {}
    matches = list(_NAME.finditer(text))
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        body = text[match.end() : end].strip("\n")
        lines = body.splitlines()
        if not lines or not lines[0].startswith("-- "):
            raise ValueError(f"query {match.group(1)!r} has no description line")
        description = lines[0][3:].strip()
        sql = "\n".join(line for line in lines[1:] if not line.startswith("--")).strip()
        if not sql:
            raise ValueError(f"query {match.group(1)!r} has no statement")
        if match.group(1) in queries:
            raise ValueError(f"query {match.group(1)!r} is defined twice")
        queries[match.group(1)] = Query(match.group(1), description, sql.rstrip(";"))
    return queries


QUERIES: dict[str, Query] = parse_queries(resources.files(__package__).joinpath("queries.sql").read_text("utf-8"))


def sql(name: str) -> str:
    return QUERIES[name].sql
