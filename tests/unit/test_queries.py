"""The named SQL blocks parse, and the parser refuses malformed files."""

from __future__ import annotations

import pytest

from outbox_mailer.store import ClaimSession, Store
from outbox_mailer.store.queries import QUERIES, parse_queries

STORE_METHODS = {"claim_due", "release_locks", "record_outcomes", "next_due_at", "find_dead_claims", "enqueue",
                 "retry", "cancel", "stats", "count_unfinished"}


def test_every_store_method_has_its_named_query() -> None:
    assert set(QUERIES) >= STORE_METHODS
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


def test_a_fragment_is_said_once_and_included_where_named() -> None:
    queries = parse_queries("-- fragment: cols\n-- d\na, b\n-- name: q\n-- d\nSELECT\n    -- include: cols\nFROM t;\n")
    assert set(queries) == {"q"}, "a fragment is not a query"
    assert queries["q"].sql == "SELECT\na, b\nFROM t"


def test_an_unknown_include_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown fragment"):
        parse_queries("-- name: q\n-- d\nSELECT\n-- include: nope\n;\n")


def test_both_claim_queries_return_the_columns_rows_py_decodes() -> None:
    from outbox_mailer.store.queries import sql

    for name in ("claim_due", "find_dead_claims"):
        assert "AS metadata" in sql(name) and "AS content_bytes, d.retry_recipients" in sql(name)
