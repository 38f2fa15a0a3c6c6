"""The connection an application hands the client, recognised by its class and run with its own driver.

Nothing here imports a driver to recognise its objects: a connection is known by the modules of its class and
of the classes it inherits from (``type(conn).__mro__``), so importing the client imports no driver, and a
driver is imported (SQLAlchemy's ``text``) only once the application has handed over one of its objects.

| what the application hands over | how the statement runs | mode |
|---|---|---|
| asyncpg ``Connection`` (or a pool's connection) | ``fetchrow`` with ``$1`` | async |
| psycopg 3 ``Connection`` / ``AsyncConnection`` | ``execute`` with ``%s`` | sync / async |
| SQLAlchemy ``Connection``, ``Session`` / their ``Async`` twins | ``execute(text(...))`` | sync / async |
| any other DB-API connection or cursor (psycopg2 ...) | a cursor's ``execute``, the driver's ``paramstyle`` | sync |

The statement runs in whatever transaction the object is in: the client never begins, commits or rolls back.
A row comes back as a tuple whatever row factory the application set (dicts give their values in order).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from contextlib import closing
from typing import Any

from .statements import Statement

__all__ = ["fetch_async", "fetch_sync"]

_SQLALCHEMY_SYNC = frozenset({"Connection", "Session", "scoped_session"})
_SQLALCHEMY_ASYNC = frozenset({"AsyncConnection", "AsyncSession", "async_scoped_session"})
# what hands out connections (asyncpg, SQLAlchemy, psycopg_pool): each statement would commit on its own
_POOLS = frozenset({"Pool", "Engine", "AsyncEngine", "ConnectionPool", "AsyncConnectionPool"})
_SUPPORTED = ("an asyncpg or psycopg connection, a SQLAlchemy Connection or Session (sync or async), "
              "or a DB-API connection or cursor")


def _classes(conn: object) -> list[tuple[str, str]]:
    """(top-level module, class name) of the object's class and of every class it inherits from."""
    return [(k.__module__.partition(".")[0], k.__name__) for k in type(conn).__mro__]


def kind_of(conn: object) -> tuple[str, bool]:
    """(``asyncpg``, ``psycopg``, ``sqlalchemy`` or ``dbapi``; whether it is async), or TypeError."""
    classes = _classes(conn)
    modules = {module for module, _ in classes}
    names = {name for _, name in classes}
    if names & _POOLS:
        raise TypeError(f"{type(conn).__qualname__} hands out connections and is no transaction: pass the "
                        "connection or session whose transaction the email belongs to")
    if "asyncpg" in modules:
        return "asyncpg", True
    if "psycopg" in modules and names & {"Connection", "AsyncConnection"}:
        return "psycopg", "AsyncConnection" in names
    if "sqlalchemy" in modules and names & (_SQLALCHEMY_SYNC | _SQLALCHEMY_ASYNC):
        return "sqlalchemy", bool(names & _SQLALCHEMY_ASYNC)
    if _paramstyle(conn) is not None and (callable(getattr(conn, "cursor", None))
                                          or callable(getattr(conn, "execute", None))):
        return "dbapi", False
    raise TypeError(f"{type(conn).__module__}.{type(conn).__qualname__} is not {_SUPPORTED}")


def _paramstyle(conn: object) -> str | None:
    """The DB-API ``paramstyle`` of the driver module the object's class comes from (PEP 249), if any."""
    for module, _ in _classes(conn):
        style = getattr(sys.modules.get(module), "paramstyle", None)
        if isinstance(style, str):
            return style
    return None


def fetch_sync(conn: Any, statement: Statement, values: Mapping[str, Any], caller: str) -> tuple[Any, ...] | None:
    """The first row of ``statement`` run on a synchronous ``conn``, as a tuple; None when there is none."""
    kind, is_async = kind_of(conn)
    if is_async:
        raise TypeError(f"{type(conn).__qualname__} is asynchronous: await {caller}_async(...) instead")
    if kind == "psycopg":
        with closing(conn.execute(statement.render("format"), statement.arguments("format", values))) as cursor:
            return _tuple(cursor.fetchone())
    if kind == "sqlalchemy":
        from sqlalchemy import text  # the application uses SQLAlchemy: it is installed and imported

        return _tuple(conn.execute(text(statement.render("named")), dict(values)).first())
    style = _paramstyle(conn) or "format"
    sql, arguments = statement.render(style), statement.arguments(style, values)
    if callable(getattr(conn, "cursor", None)):  # a connection: a cursor of our own, closed after
        with closing(conn.cursor()) as cursor:
            cursor.execute(sql, arguments)
            return _tuple(cursor.fetchone())
    conn.execute(sql, arguments)  # a cursor: its previous result is replaced
    return _tuple(conn.fetchone())


async def fetch_async(conn: Any, statement: Statement, values: Mapping[str, Any],
                      caller: str) -> tuple[Any, ...] | None:
    """The first row of ``statement`` run on an asynchronous ``conn``, as a tuple; None when there is none."""
    kind, is_async = kind_of(conn)
    if not is_async:
        raise TypeError(f"{type(conn).__qualname__} is synchronous: call {caller}(...) instead")
    if kind == "asyncpg":
        arguments = statement.arguments("numeric_dollar", values)
        return _tuple(await conn.fetchrow(statement.render("numeric_dollar"), *arguments))
    if kind == "psycopg":
        cursor = await conn.execute(statement.render("format"), statement.arguments("format", values))
        try:
            return _tuple(await cursor.fetchone())
        finally:
            await cursor.close()
    from sqlalchemy import text  # the application uses SQLAlchemy: it is installed and imported

    result = await conn.execute(text(statement.render("named")), dict(values))
    return _tuple(result.first())


def _tuple(row: Any) -> tuple[Any, ...] | None:
    """A row of any driver or row factory as a tuple of its values in column order."""
    if row is None:
        return None
    if isinstance(row, Mapping):
        return tuple(row.values())
    return tuple(row)
