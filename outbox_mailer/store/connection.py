"""Connections and error translation for the store."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime, timedelta
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


_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _decode_timestamptz(value: tuple[int]) -> datetime | None:
    """PostgreSQL's microseconds since 2000; None for infinities and years Python cannot hold."""
    try:
        return _PG_EPOCH + timedelta(microseconds=value[0])
    except OverflowError:
        return None


def _encode_timestamptz(value: datetime) -> tuple[int]:
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return ((aware - _PG_EPOCH) // _MICROSECOND,)


async def init_reading_connection(conn: asyncpg.Connection) -> None:
    """For the short operations (status, list, operators' commands): a timestamp no datetime can
    hold (a row written before schema version 6) reads as None instead of failing the query.
    The daemon's claim queries return epoch seconds instead (rows.py) and keep the C codec."""
    await init_connection(conn)
    await conn.set_type_codec("timestamptz", encoder=_encode_timestamptz, decoder=_decode_timestamptz,
                              schema="pg_catalog", format="tuple")


async def connect(url: str, timeout: float) -> asyncpg.Connection:
    with translate_errors():
        conn = await asyncpg.connect(url, timeout=timeout, server_settings={"application_name": "outbox-mailer"})
        await init_connection(conn)
        return conn


def affected(status: str) -> int:
    """Rows affected, from a command tag such as 'UPDATE 42' or 'DELETE 0'."""
    return int(status.rsplit(" ", 1)[-1])
