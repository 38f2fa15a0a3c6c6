"""Connections and error translation for the store."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import asyncpg

from ..errors import DatabaseError, DatabaseUnavailable, SchemaMismatch

CHANNEL = "outbox_mailer"
_UNAVAILABLE = (
    OSError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.ConnectionFailureError,
    asyncpg.exceptions.TooManyConnectionsError,
    asyncpg.exceptions.InternalClientError,
    asyncpg.exceptions.InterfaceError,
    TimeoutError,
)


@contextlib.contextmanager
def translate_errors() -> Any:
    try:
        yield
    except asyncpg.exceptions.UndefinedTableError as exc:
        raise SchemaMismatch(f"{exc}; run `outbox-mailer migrate`") from exc
    except _UNAVAILABLE as exc:
        raise DatabaseUnavailable(f"database unavailable: {exc}") from exc
    except asyncpg.PostgresError as exc:
        raise DatabaseError(f"database error: {exc}") from exc


async def init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def connect(url: str, timeout: float) -> asyncpg.Connection:
    with translate_errors():
        conn = await asyncpg.connect(url, timeout=timeout, server_settings={"application_name": "outbox-mailer"})
        await init_connection(conn)
        return conn


def affected(status: str) -> int:
    """Rows affected, from a command tag such as 'UPDATE 42' or 'DELETE 0'."""
    return int(status.rsplit(" ", 1)[-1])
