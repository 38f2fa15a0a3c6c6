"""Every named query is valid SQL against the migrated schema (PREPARE checks it)."""

from __future__ import annotations

import subprocess

import pytest

from outbox_mailer.store.queries import QUERIES


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_query_prepares(db_url: str, name: str) -> None:
    query = QUERIES[name].sql
    if query.lstrip().upper().startswith("CREATE"):
        statement = f"BEGIN; {query}; ROLLBACK;"
    else:
        statement = f"PREPARE q AS {query}"
    result = subprocess.run(["psql", "-X", "-v", "ON_ERROR_STOP=1", db_url, "-c", statement],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
