"""Connections and error translation for the store."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeAlias, TypeVar
from urllib.parse import urlsplit, urlunsplit

import anyio
import asyncpg
from asyncpg.pool import PoolConnectionProxy

from ..errors import DatabaseBusy, DatabaseError, DatabaseUnavailable, SchemaMismatch

T = TypeVar("T")
# a connection, or the proxy of one that a pool hands out (it answers every call a connection does)
Conn: TypeAlias = "asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]"
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
# what an exception without a message (asyncpg's timeouts) means, for the operator
_DESCRIPTIONS: dict[type[BaseException], str] = {TimeoutError: "no answer in time (TimeoutError)"}


@contextlib.contextmanager
def translate_errors() -> Any:
    try:
        yield
    except asyncpg.exceptions.UndefinedTableError as exc:
        raise SchemaMismatch(f"{exc}; run `outbox-mailer migrate`") from exc
    except (asyncpg.exceptions.LockNotAvailableError, asyncpg.exceptions.QueryCanceledError) as exc:
        raise DatabaseBusy(f"database busy: {exc}") from exc
    except _UNAVAILABLE as exc:
        described = str(exc) or _DESCRIPTIONS.get(type(exc), type(exc).__name__)
        raise DatabaseUnavailable(f"database unavailable: {described}") from exc
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


def one(row: asyncpg.Record | None) -> asyncpg.Record:
    """The row of a statement that always returns one (an aggregate, a function's result)."""
    if row is None:
        raise DatabaseError("a statement that returns one row returned none")
    return row


async def settled(statement: Awaitable[T]) -> T:
    """Await a statement shielded from cancellation. asyncpg answers a statement cancelled
    mid-flight by opening a side connection to cancel it on the server; a daemon stopping meanwhile
    leaves that connection behind, half open, and asyncio reports its lost future after the daemon
    has gone (asyncpg issue 1310). The statement is short and bounded by the daemon's
    statement_timeout, so the stop waits for it instead."""
    with anyio.CancelScope(shield=True):
        result = await statement
    return result


async def uncancelled(opening: Awaitable[T], close: Callable[[T], Awaitable[Any]]) -> T:
    """Await ``opening`` (a connect, a pool's creation) shielded from cancellation; its own timeout
    bounds the wait. asyncpg cancelled while a socket is being set up for its SSL request closes the
    socket, and the closing sets an exception on a future nobody awaits any more: the event loop
    reports it ("unexpected connection_lost() call") after the task that was stopped has gone. What
    the shield let finish is closed if the caller was cancelled meanwhile."""
    opened = await settled(opening)
    try:
        await anyio.lowlevel.checkpoint()
    except BaseException:
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            await close(opened)
        raise
    return opened


@dataclass(frozen=True, slots=True)
class SessionLimits:
    """How long the daemon's sessions wait on PostgreSQL, from one setting (DATABASE_TIMEOUT_SECONDS,
    default 30 s: docs/production-postgres.md). The server ends a statement, a lock wait, a
    transaction left open and, on the heartbeated sessions, a session left idle; its keepalives end
    the session of a client that vanished, which frees the advisory locks. The client gives a
    statement a little longer than the server (whose error says more), and its own keepalives
    notice a server that vanished. Set with set_config after connecting, not as startup
    parameters, which PgBouncer refuses."""

    seconds: float = 30.0

    @property
    def command_timeout(self) -> float:
        return self.seconds + 5.0

    @property
    def heartbeat(self) -> float:
        """How often an idle heartbeated session is pinged (sessions.py), and how long a ping may take."""
        return self.seconds / 3

    def server_settings(self, *, heartbeated: bool) -> dict[str, str]:
        t = self.seconds
        settings = {
            "statement_timeout": f"{t * 1000:.0f}ms",
            "lock_timeout": f"{t * 1000 / 3:.0f}ms",
            "idle_in_transaction_session_timeout": f"{t * 2000:.0f}ms",
            "tcp_keepalives_idle": f"{max(1, round(t / 2))}",
            "tcp_keepalives_interval": f"{max(1, round(t / 6))}",
            "tcp_keepalives_count": "3",
            "tcp_user_timeout": f"{t * 1000:.0f}ms",
        }
        if heartbeated:  # pinged every third of it: only a session nobody answers for stays idle this long
            settings["idle_session_timeout"] = f"{t * 2000:.0f}ms"
        return settings

    def keep_alive(self, conn: Conn) -> None:
        """TCP keepalives and a user timeout on the client's socket (a Unix socket needs neither)."""
        transport = getattr(conn, "_transport", None)  # asyncpg has no public way to the socket
        sock = transport.get_extra_info("socket") if transport is not None else None
        if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
            return
        t = self.seconds
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, max(1, round(t / 2)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, max(1, round(t / 6)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(t * 1000))

    async def apply(self, conn: Conn, *, heartbeated: bool) -> None:
        self.keep_alive(conn)
        names, values = zip(*self.server_settings(heartbeated=heartbeated).items(), strict=True)
        await conn.execute(
            "SELECT set_config(name, value, false) FROM unnest($1::text[], $2::text[]) AS s(name, value)",
            list(names), list(values))


def host_urls(url: str) -> list[str]:
    """A URL naming several hosts (``h1:5432,h2:5432``) as one URL per host, in order, each keeping
    the rest (``target_session_attrs`` included); any other URL as itself. asyncpg's connect timeout
    covers the whole host list, so a first host that accepts TCP but never answers (a machine gone,
    a hung server) would use it all up on every attempt and the next host would never be tried;
    one host at a time, each gets the full timeout, as with libpq's ``connect_timeout``.
    ``prefer-standby`` needs asyncpg to see every host at once, so such a URL stays whole."""
    parts = urlsplit(url)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    if "," not in hosts or "prefer-standby" in parts.query:
        return [url]
    return [urlunsplit(parts._replace(netloc=f"{userinfo}{at}{host}")) for host in hosts.split(",")]


_NEXT_HOST = (OSError, TimeoutError, asyncpg.exceptions.TargetServerAttributeNotMatched,
              asyncpg.exceptions.CannotConnectNowError, asyncpg.exceptions.ConnectionFailureError)


async def connect_each_host(dsn: str | None = None, **kwargs: Any) -> asyncpg.Connection:
    """``asyncpg.connect``, trying the hosts one at a time with the whole ``timeout`` each (host_urls);
    also the ``connect`` of the CLI's pools. The last host's error is raised when none will do."""
    if dsn is None:  # the parameters alone (how asyncpg's pool may call it): one connection as asyncpg makes it
        return await asyncpg.connect(**kwargs)
    *others, last = host_urls(dsn)
    for url in others:
        try:
            return await asyncpg.connect(url, **kwargs)
        except _NEXT_HOST:
            continue
    return await asyncpg.connect(last, **kwargs)


async def connect(url: str, timeout: float, limits: SessionLimits | None = None) -> asyncpg.Connection:
    """A connection of its own; with ``limits``, a heartbeated daemon session (sessions.py)."""
    with translate_errors():
        conn = await uncancelled(
            connect_each_host(url, timeout=timeout, server_settings={"application_name": "outbox-mailer"},
                            command_timeout=limits.command_timeout if limits is not None else None),
            lambda c: c.close(timeout=5))
        try:
            if limits is not None:
                await limits.apply(conn, heartbeated=True)
            await init_connection(conn)
        except BaseException:
            conn.terminate()
            raise
        return conn


def affected(status: str) -> int:
    """Rows affected, from a command tag such as 'UPDATE 42' or 'DELETE 0'."""
    return int(status.rsplit(" ", 1)[-1])
