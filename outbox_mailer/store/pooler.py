"""Is the daemon's database URL behind a transaction- or statement-mode pooler?

The daemon's advisory locks and LISTEN live in a database *session*: behind PgBouncer in
transaction or statement mode, each transaction may run on another server connection, so a key
locked in one statement is unlocked (or not) in another session, and notifications go to
whichever client holds the server connection then. Peers hit exactly this (leaked session locks
deadlocking workers). :func:`session_pooling_problem` asks the server who it is, on two client
connections A and B: each first marks its server session with a token of its own (a setting
that lasts for the session), then runs statements, each its own transaction, in the order
``A A B B A B``, ``ROUNDS`` times over, and each reads back its server process and the mark.
Directly, or through a session-mode pooler, A always finds its own process and mark and B its
own. A transaction pooler that hands out the server connection released last (PgBouncer's
default) gives B the one A just left. One that hands out the connection idle longest
(``server_round_robin = 1``), with two server connections idle, would serve a strict ``A B A B``
alternation one each and pass it; it gives A's second transaction in a row the other one. The
further rounds catch a pooler that picks by chance. A mark missing or foreign shows a pooler that fronts several
servers (whose process ids may coincide) or resets sessions between transactions.

Twenty short statements on two connections, at start-up only; ``timeout`` bounds each connect
and each statement, so a pooler that accepts and then never answers fails the check as
unavailable instead of holding start-up.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator

import asyncpg

from ..errors import DatabaseUnavailable
from .connection import connect_each_host, one, translate_errors
from .queries import sql

ROUNDS = 3
ORDER = (0, 0, 1, 1, 0, 1)  # A A B B A B: a repeat and a switch, each connection both first and second


async def session_pooling_problem(url: str, *, timeout: float = 10.0, rounds: int = ROUNDS) -> str | None:
    """None when the URL gives the daemon sessions of its own; else what is wrong, in one line.
    Raises DatabaseUnavailable when a connect or a statement gets no answer within ``timeout``."""
    with translate_errors():
        try:
            async with _probing(url, timeout) as first, _probing(url, timeout) as second:
                seen = await _watch((first, second), timeout, rounds)
        except TimeoutError as exc:
            raise DatabaseUnavailable(
                f"database unavailable: no answer within {timeout:g} s while checking for a pooler") from exc
    if seen is None:
        return None
    return (f"OUTBOX_MAILER_DATABASE_URL goes through a transaction- or statement-mode pooler: {seen}. "
            "The daemon's advisory locks and LISTEN need a session of their own: point the URL at "
            "PostgreSQL itself, or at a PgBouncer pool with pool_mode = session (applications may keep "
            "inserting through transaction mode)")


async def _watch(conns: tuple[asyncpg.Connection, asyncpg.Connection], timeout: float, rounds: int) -> str | None:
    """What showed that a connection's transactions do not share one server session of its own, or None."""
    tokens = [secrets.token_hex(8) for _ in conns]
    pids = [(one(await conn.fetchrow(sql("mark_probe_session"), token, timeout=timeout)))["pid"]
            for conn, token in zip(conns, tokens, strict=True)]
    if pids[0] == pids[1]:
        return f"two connections were served by one server process (pid {pids[0]})"
    for i in ORDER * rounds:
        row = one(await conns[i].fetchrow(sql("probe_session"), timeout=timeout))
        if row["mark"] == tokens[1 - i]:
            return f"two connections were served by one server process (pid {row['pid']})"
        if row["pid"] != pids[i]:
            return f"one connection moved between server processes (pid {pids[i]}, then {row['pid']})"
        if row["mark"] != tokens[i]:
            return f"one connection's session did not last from one transaction to the next (pid {pids[i]})"
    return None


@contextlib.asynccontextmanager
async def _probing(url: str, timeout: float) -> AsyncIterator[asyncpg.Connection]:
    # unnamed statements: a transaction pooler would lose named prepared ones between transactions
    conn = await connect_each_host(url, timeout=timeout, statement_cache_size=0)
    try:
        yield conn
    except BaseException:
        conn.terminate()  # it may be the one that went silent: a goodbye would wait for nothing
        raise
    with contextlib.suppress(Exception):
        await conn.close(timeout=5)
