"""The named SQL blocks parse, and the parser refuses malformed files."""

from __future__ import annotations

import pytest

from outbox_mailer.queries import QUERIES, parse_queries
from outbox_mailer.store import ClaimSession, Store

STORE_METHODS = {"claim_due", "release_locks", "record_outcomes", "next_due_at", "find_dead_claims", "enqueue",
                 "retry", "cancel", "stats", "count_unfinished"}


def test_every_store_method_has_its_named_query() -> None:
    assert STORE_METHODS <= set(QUERIES)
    for name in STORE_METHODS:
        assert hasattr(ClaimSession, name) or hasattr(Store, name), name


def test_every_query_has_a_description_and_a_statement() -> None:
    for query in QUERIES.values():
        assert query.description and query.sql and not query.sql.endswith(";")


def test_duplicate_names_are_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        parse_queries("-- name: a\n-- d\nSELECT 1;\n-- name: a\n-- d\nSELECT 2;\n")


def test_block_without_statement_is_refused() -> None:
    with pytest.raises(ValueError, match="no statement"):
        parse_queries("-- name: a\n-- only a description\n")
