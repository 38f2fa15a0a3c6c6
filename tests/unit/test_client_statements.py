"""The client's statements in each driver's placeholder style, and the connections it recognises by class."""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from outbox_mailer.client import Email, enqueue, enqueue_async, status
from outbox_mailer.client.drivers import kind_of
from outbox_mailer.client.statements import ENQUEUE, PARAMSTYLES, STATUS, Statement

PLACEHOLDERS = {"numeric_dollar": r"\$1", "format": "%s", "pyformat": r"%\(emails\)s", "named": ":emails",
                "qmark": r"\?", "numeric": ":1"}


@pytest.mark.parametrize("style", PARAMSTYLES)
def test_each_style_gets_its_own_placeholder_and_nothing_else_that_a_driver_would_read(style: str) -> None:
    sql = ENQUEUE.render(style)
    assert len(re.findall(PLACEHOLDERS[style], sql)) == 1
    rest = re.sub(PLACEHOLDERS[style], "", sql)
    assert not re.search(r"[%?$]|:\w|::", rest), "a character some driver would read as a placeholder"


def test_named_styles_take_a_dict_and_the_others_a_tuple() -> None:
    two = Statement("two", "SELECT :a, :b, :a")
    assert two.render("numeric_dollar") == "SELECT $1, $2, $1"
    assert two.arguments("pyformat", {"b": 2, "a": 1}) == {"a": 1, "b": 2}
    assert two.arguments("format", {"b": 2, "a": 1}) == (1, 2)
    assert STATUS.parameters == ("dedupe_key",)


def test_an_unknown_style_is_refused() -> None:
    with pytest.raises(TypeError, match="'pyformat2' is not one of"):
        ENQUEUE.render("pyformat2")


class Recorder:
    """A DB-API cursor (the port): records what it is asked to run and answers with one row."""

    def __init__(self, answer: tuple[Any, ...] | None) -> None:
        self.answer, self.executed = answer, list[tuple[str, Any]]()

    def execute(self, sql: str, arguments: Any) -> None:
        self.executed.append((sql, arguments))

    def fetchone(self) -> tuple[Any, ...] | None:
        return self.answer


@pytest.fixture
def qmark_driver() -> Iterator[type[Recorder]]:
    """A driver module of paramstyle ``qmark`` whose cursor class is Recorder's subclass."""
    module = types.ModuleType("qmarkdb")
    module.paramstyle = "qmark"  # type: ignore[attr-defined]  (a module attribute PEP 249 defines)
    cursor = type("Cursor", (Recorder,), {"__module__": "qmarkdb.cursors"})
    sys.modules["qmarkdb"] = module
    try:
        yield cursor
    finally:
        del sys.modules["qmarkdb"]


def test_a_dbapi_cursor_is_run_in_its_driver_s_paramstyle(qmark_driver: type[Recorder]) -> None:
    cursor = qmark_driver((["t"],))
    assert enqueue(cursor, Email(dedupe_key="k", to=["a@example.com"], subject="s", text="t")) is True
    [(sql, arguments)] = cursor.executed
    assert "CAST(? AS text)" in sql and len(arguments) == 1 and '"dedupe_key":"k"' in arguments[0]
    cursor = qmark_driver(None)
    assert status(cursor, "k") is None
    assert cursor.executed == [(STATUS.render("qmark"), ("k",))]


@pytest.mark.anyio
async def test_a_sync_connection_given_to_an_async_call_is_refused_naming_the_call_to_use(
    qmark_driver: type[Recorder],
) -> None:
    email = Email(dedupe_key="k", to=["a@example.com"], subject="s", text="t")
    with pytest.raises(TypeError, match=r"call enqueue_many\(\.\.\.\) instead"):
        await enqueue_async(qmark_driver(None), email)


def test_an_object_of_no_known_driver_is_refused_naming_its_class() -> None:
    with pytest.raises(TypeError, match=r"builtins\.dict is not an asyncpg or psycopg connection"):
        kind_of({})
