"""The email list's recipient filter matches a whole address (its index holds whole addresses), and its
label says so: a part of an address finds nothing, and the page does not promise otherwise."""

from __future__ import annotations

import re

import pytest

from tests.console_harness import Client
from tests.integration.conftest import insert
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio


async def test_the_recipient_filter_is_labelled_as_the_whole_address_it_matches(
        operator: Client, store: SqlStore) -> None:
    await insert(store, "to-ada", to_addresses=["Ada Lovelace <Ada@Example.com>"])
    whole = await operator.get("/emails?recipient=ada@example.com")
    assert "to-ada" in whole.text
    part = await operator.get("/emails?recipient=ada")
    assert "to-ada" not in part.text
    [label] = re.findall(r'<label for="f-recipient">([^<]*)</label>', part.text)
    assert label == "Recipient address (whole, any case)"
