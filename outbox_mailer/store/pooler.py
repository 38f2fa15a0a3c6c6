"""Is the daemon's database URL behind a transaction- or statement-mode pooler?

The daemon's advisory locks and LISTEN live in a database *session*: behind PgBouncer in
transaction or statement mode, each transaction may run on another server connection, so a key
locked in one statement is unlocked (or not) in another session, and notifications go to
whichever client holds the server connection then. Peers hit exactly this (leaked session locks
deadlocking workers). :func:`session_pooling_problem` asks the server who it is: two client
connections, and three statements, each its own transaction: A, B, A. Directly, or through a
session-mode pooler, A's two statements run in one backend and B's in another; a transaction
pooler gives B the backend A just released (one server connection serves both) or gives A
another backend for its second transaction. Either one shows.
"""

from __future__ import annotations

import contextlib

from .connection import connect_each_host, translate_errors

PROBE = "SELECT pg_backend_pid()"


async def session_pooling_problem(url: str, *, timeout: float = 10.0) -> str | None:
    """None when the URL gives the daemon sessions of its own; else what is wrong, in one line."""
    with translate_errors():
        # unnamed statements: a transaction pooler would lose named prepared ones between transactions
        first = await connect_each_host(url, timeout=timeout, statement_cache_size=0)
        try:
            second = await connect_each_host(url, timeout=timeout, statement_cache_size=0)
            try:
                a1 = await first.fetchval(PROBE)
                b = await second.fetchval(PROBE)
                a2 = await first.fetchval(PROBE)
            finally:
                with contextlib.suppress(Exception):
                    await second.close(timeout=5)
        finally:
            with contextlib.suppress(Exception):
                await first.close(timeout=5)
    if a1 == b:
        seen = f"two connections were served by one server process (pid {a1})"
    elif a1 != a2:
        seen = f"one connection moved between server processes (pid {a1}, then {a2})"
    else:
        return None
    return (f"OUTBOX_MAILER_DATABASE_URL goes through a transaction- or statement-mode pooler: {seen}. "
            "The daemon's advisory locks and LISTEN need a session of their own: point the URL at "
            "PostgreSQL itself, or at a PgBouncer pool with pool_mode = session (applications may keep "
            "inserting through transaction mode)")
