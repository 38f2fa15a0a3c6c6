"""Enqueue emails from a Python application, in the application's own transaction (docs/client.md).

::

    from outbox_mailer.client import Email, enqueue

    with psycopg.connect(url) as conn:          # or SQLAlchemy, asyncpg, psycopg2 ...
        create_order(conn, ...)
        enqueue(conn, Email(dedupe_key=f"order-{order_id}", to=[customer], subject="Thanks", text="..."))
    # committed together: the daemon sends it; rolled back together: nothing is sent

* :class:`Email` is checked when it is made (:class:`InvalidEmail` names the field, ``to[1]``).
* :func:`enqueue` / :func:`enqueue_many` write through the connection or session they are given, inside its
  transaction, as one statement: True for an email that made a new row, False for one whose dedupe key
  existed (in the table, or earlier in the same call). They never commit.
* An email without a ``traceparent`` is enqueued under the application's current OpenTelemetry span, when it
  has imported OpenTelemetry and is in a span (docs/tracing.md); the client never imports it.
* :func:`status` reads one email's :class:`EmailStatus` (None for an unknown key).
* ``enqueue_async``, ``enqueue_many_async`` and ``status_async`` do the same on asyncpg, psycopg's
  ``AsyncConnection`` and SQLAlchemy's ``AsyncConnection`` or ``AsyncSession``.

Importing this package imports no database driver and nothing of the daemon (``drivers.py``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..tracing.traceparent import current_traceparent
from .drivers import fetch_async, fetch_sync
from .emails import Attachment, Email, InvalidEmail, dedupe_key_problem
from .statements import ENQUEUE, STATUS, EmailStatus

__all__ = ["Attachment", "Email", "EmailStatus", "InvalidEmail", "enqueue", "enqueue_async", "enqueue_many",
           "enqueue_many_async", "status", "status_async"]


def enqueue(conn: Any, email: Email) -> bool:
    """Insert ``email`` in ``conn``'s transaction: True if it made a new row, False if its key existed."""
    return enqueue_many(conn, [email])[0]


def enqueue_many(conn: Any, emails: Sequence[Email]) -> list[bool]:
    """Insert ``emails`` in one statement; for each, in order, True if it made a new row (see :func:`enqueue`)."""
    if not emails:
        return []
    return _created(fetch_sync(conn, ENQUEUE, {"emails": _payload(emails)}, "enqueue_many"), len(emails))


async def enqueue_async(conn: Any, email: Email) -> bool:
    """:func:`enqueue` on an asynchronous connection or session."""
    return (await enqueue_many_async(conn, [email]))[0]


async def enqueue_many_async(conn: Any, emails: Sequence[Email]) -> list[bool]:
    """:func:`enqueue_many` on an asynchronous connection or session."""
    if not emails:
        return []
    return _created(await fetch_async(conn, ENQUEUE, {"emails": _payload(emails)}, "enqueue_many"), len(emails))


def status(conn: Any, dedupe_key: str) -> EmailStatus | None:
    """The status of the email with ``dedupe_key`` as ``conn`` sees it; None when there is no such email."""
    return _status(fetch_sync(conn, STATUS, {"dedupe_key": _key(dedupe_key)}, "status"))


async def status_async(conn: Any, dedupe_key: str) -> EmailStatus | None:
    """:func:`status` on an asynchronous connection or session."""
    return _status(await fetch_async(conn, STATUS, {"dedupe_key": _key(dedupe_key)}, "status"))


def _payload(emails: Sequence[Email]) -> str:
    """The emails' rows as one JSON array (every value was checked when each Email was made)."""
    if isinstance(emails, Email):
        raise TypeError("enqueue_many takes a list of emails: use enqueue for one")
    rows = []
    traceparent = current_traceparent()
    for index, email in enumerate(emails):
        if not isinstance(email, Email):
            raise TypeError(f"emails[{index}] is a {type(email).__name__}, not an outbox_mailer.client.Email")
        given = traceparent is None or email.traceparent is not None  # an explicit one wins
        rows.append(email.row if given else {**email.row, "traceparent": traceparent})
    return json.dumps(rows, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _created(row: tuple[Any, ...] | None, count: int) -> list[bool]:
    answers = [] if row is None else list(row[0])
    if len(answers) != count:  # the statement answers once per email: anything else is not our table
        raise RuntimeError(f"the enqueue statement answered {len(answers)} times for {count} emails")
    return [bool(a) for a in answers]


def _key(dedupe_key: object) -> str:
    if not isinstance(dedupe_key, str):
        raise TypeError(f"a dedupe key is a str, not {type(dedupe_key).__name__}")
    problem = dedupe_key_problem(dedupe_key)
    if problem:
        raise InvalidEmail("dedupe_key", problem)
    return dedupe_key


def _status(row: tuple[Any, ...] | None) -> EmailStatus | None:
    return None if row is None else EmailStatus(*row)
