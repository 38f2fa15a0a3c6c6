"""outbox_mailer.client through every driver it serves, against a real PostgreSQL: a committed enqueue is a row
with the email's values, a rolled-back one leaves none, a key given twice is new then existing, and status reads
what the table holds. Each driver is opened as an application opens it (its own transaction)."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg
import psycopg
import psycopg2
import pytest
import sqlalchemy
from psycopg.rows import dict_row
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from outbox_mailer import client
from outbox_mailer.client import Attachment, Email, EmailStatus

pytestmark = pytest.mark.anyio


@dataclass
class Handle:
    """One driver's connection inside an open transaction, and the client's calls on it."""

    conn: Any
    is_async: bool
    commit: Callable[[], Awaitable[None]]
    rollback: Callable[[], Awaitable[None]]

    async def enqueue_many(self, emails: Sequence[Email]) -> list[bool]:
        if self.is_async:
            return await client.enqueue_many_async(self.conn, emails)
        return client.enqueue_many(self.conn, emails)

    async def enqueue(self, email: Email) -> bool:
        return await client.enqueue_async(self.conn, email) if self.is_async else client.enqueue(self.conn, email)

    async def status(self, key: str) -> EmailStatus | None:
        return await client.status_async(self.conn, key) if self.is_async else client.status(self.conn, key)


def done(action: Callable[[], object]) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        result = action()
        if isinstance(result, Awaitable):
            await result
    return run


def url_for(db_url: str, scheme: str) -> str:
    return db_url.replace("postgresql://", f"{scheme}://", 1)


@contextlib.asynccontextmanager
async def psycopg_sync(db_url: str) -> AsyncIterator[Handle]:
    with psycopg.connect(db_url, row_factory=dict_row) as conn:  # an application's row factory is its own
        yield Handle(conn, False, done(conn.commit), done(conn.rollback))


@contextlib.asynccontextmanager
async def psycopg_async(db_url: str) -> AsyncIterator[Handle]:
    async with await psycopg.AsyncConnection.connect(db_url) as conn:
        yield Handle(conn, True, done(conn.commit), done(conn.rollback))


async def in_transactions(conn: Any) -> Handle:
    """asyncpg has no transaction outside ``conn.transaction()``: each commit or rollback starts the next."""
    current = [conn.transaction()]
    await current[0].start()

    def ending(how: str) -> Callable[[], Awaitable[None]]:
        async def end() -> None:
            await getattr(current[0], how)()
            current[0] = conn.transaction()
            await current[0].start()
        return end

    return Handle(conn, True, ending("commit"), ending("rollback"))


@contextlib.asynccontextmanager
async def asyncpg_connection(db_url: str) -> AsyncIterator[Handle]:
    conn = await asyncpg.connect(db_url)
    try:
        yield await in_transactions(conn)
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def asyncpg_pool(db_url: str) -> AsyncIterator[Handle]:
    async with asyncpg.create_pool(db_url, min_size=1, max_size=1) as pool, pool.acquire() as conn:
        yield await in_transactions(conn)


Opener = Callable[[str], contextlib.AbstractAsyncContextManager[Handle]]


def sqlalchemy_sync(scheme: str, begin: Callable[[sqlalchemy.Engine], Any]) -> Opener:
    """``begin(engine)``: the application's Connection or Session, inside a transaction it commits itself."""
    @contextlib.asynccontextmanager
    async def open_(db_url: str) -> AsyncIterator[Handle]:
        engine = sqlalchemy.create_engine(url_for(db_url, scheme))
        try:
            with begin(engine) as conn:
                yield Handle(conn, False, done(conn.commit), done(conn.rollback))
        finally:
            engine.dispose()
    return open_


def sqlalchemy_async(scheme: str, begin: Callable[[AsyncEngine], Any]) -> Opener:
    """``begin(engine)``: the application's AsyncConnection or AsyncSession."""
    @contextlib.asynccontextmanager
    async def open_(db_url: str) -> AsyncIterator[Handle]:
        engine = create_async_engine(url_for(db_url, scheme))
        try:
            async with begin(engine) as conn:
                yield Handle(conn, True, done(conn.commit), done(conn.rollback))
        finally:
            await engine.dispose()
    return open_


@contextlib.asynccontextmanager
async def psycopg2_cursor(db_url: str) -> AsyncIterator[Handle]:
    conn = psycopg2.connect(db_url)
    try:
        with conn.cursor() as cursor:
            yield Handle(cursor, False, done(conn.commit), done(conn.rollback))
    finally:
        conn.close()


@contextlib.asynccontextmanager
async def psycopg2_connection(db_url: str) -> AsyncIterator[Handle]:
    conn = psycopg2.connect(db_url)
    try:
        yield Handle(conn, False, done(conn.commit), done(conn.rollback))
    finally:
        conn.close()


DRIVERS: dict[str, Opener] = {
    "psycopg": psycopg_sync,
    "psycopg-async": psycopg_async,
    "asyncpg": asyncpg_connection,
    "asyncpg-pool": asyncpg_pool,
    "sqlalchemy-psycopg2-connection": sqlalchemy_sync("postgresql+psycopg2", lambda e: e.connect()),
    "sqlalchemy-psycopg2-session": sqlalchemy_sync("postgresql+psycopg2", Session),
    "sqlalchemy-psycopg-session": sqlalchemy_sync("postgresql+psycopg", Session),
    "sqlalchemy-asyncpg-connection": sqlalchemy_async("postgresql+asyncpg", lambda e: e.connect()),
    "sqlalchemy-asyncpg-session": sqlalchemy_async("postgresql+asyncpg", AsyncSession),
    "sqlalchemy-psycopg-async-session": sqlalchemy_async("postgresql+psycopg", AsyncSession),
    "psycopg2-cursor": psycopg2_cursor,
    "psycopg2-connection": psycopg2_connection,
}


@pytest.fixture(params=sorted(DRIVERS))
async def handle(request: pytest.FixtureRequest, db_url: str) -> AsyncIterator[Handle]:
    async with DRIVERS[request.param](db_url) as opened:
        yield opened


@contextlib.contextmanager
def reader(db_url: str) -> Iterator[psycopg.Connection[dict[str, Any]]]:
    """What another session sees: committed rows only."""
    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:
        yield conn


def rows(db_url: str) -> dict[str, dict[str, Any]]:
    with reader(db_url) as conn:
        return {r["dedupe_key"]: r for r in conn.execute("SELECT * FROM email_deliveries")}


WHEN = datetime(2030, 5, 6, 7, 8, 9, tzinfo=UTC)
FULL = Email(
    dedupe_key="order-1", to=["Zoë <zoe@example.com>", "bob@example.com"], cc=["c@example.com"],
    bcc=["d@example.com"], subject="Your order ✓", text="Thanks", html="<p>Thanks</p>",
    reply_to="help@example.com", from_address="Shop <shop@example.com>",
    headers={"X-Campaign": "spring", "List-Unsubscribe": "<https://example.com/u/1>"},
    attachments=[Attachment("invoice.pdf", b"%PDF-1.7\x00\xff", "application/pdf")],
    metadata={"order": 1, "tags": ["a", None, True, 1.5], "nested": {"k": "ü"}}, transport="smtp", priority=-5,
    scheduled_at=WHEN, expires_at=WHEN.replace(year=2031), max_attempts=3, ignore_suppressions=True,
)


async def test_a_committed_enqueue_is_a_row_with_the_email_s_values(handle: Handle, db_url: str) -> None:
    assert await handle.enqueue(FULL) is True
    assert rows(db_url) == {}, "nothing is visible before the caller commits"
    await handle.commit()
    row = rows(db_url)["order-1"]
    assert row["status"] == "pending"
    assert row["to_addresses"] == ["Zoë <zoe@example.com>", "bob@example.com"]
    assert (row["cc_addresses"], row["bcc_addresses"]) == (["c@example.com"], ["d@example.com"])
    assert (row["subject"], row["text_body"], row["html_body"]) == ("Your order ✓", "Thanks", "<p>Thanks</p>")
    assert (row["reply_to"], row["from_address"]) == ("help@example.com", "Shop <shop@example.com>")
    assert row["headers"] == {"X-Campaign": "spring", "List-Unsubscribe": "<https://example.com/u/1>"}
    assert row["attachments"] == [{"filename": "invoice.pdf", "content_type": "application/pdf",
                                   "content_base64": base64.b64encode(b"%PDF-1.7\x00\xff").decode()}]
    assert row["metadata"] == {"order": 1, "tags": ["a", None, True, 1.5], "nested": {"k": "ü"}}
    assert (row["transport"], row["priority"], row["max_attempts"], row["ignore_suppressions"]) == (
        "smtp", -5, 3, True)
    assert (row["scheduled_at"], row["expires_at"]) == (WHEN, WHEN.replace(year=2031))


async def test_a_rolled_back_enqueue_leaves_no_row(handle: Handle, db_url: str) -> None:
    assert await handle.enqueue_many([FULL, Email(dedupe_key="b", to="b@example.com", subject="s", text="t")]) == [
        True, True]
    await handle.rollback()
    assert rows(db_url) == {}


async def test_a_key_given_twice_is_new_then_existing(handle: Handle, db_url: str) -> None:
    first = Email(dedupe_key="k", to=["a@example.com"], subject="first", text="1")
    assert await handle.enqueue(first) is True
    assert await handle.enqueue(Email(dedupe_key="k", to=["b@example.com"], subject="second", text="2")) is False
    await handle.commit()
    assert await handle.enqueue(first) is False, "a committed key exists too"
    await handle.commit()
    assert rows(db_url)["k"]["subject"] == "first"


async def test_enqueue_many_answers_in_input_order_and_a_key_repeated_in_one_call_is_new_once(
    handle: Handle, db_url: str
) -> None:
    def mail(key: str, subject: str) -> Email:
        return Email(dedupe_key=key, to=["a@example.com"], subject=subject, text="t")

    assert await handle.enqueue(mail("old", "before")) is True
    answers = await handle.enqueue_many([mail("x", "x1"), mail("old", "again"), mail("y", "y1"), mail("x", "x2")])
    assert answers == [True, False, True, False]
    assert await handle.enqueue_many([]) == []
    await handle.commit()
    assert {k: r["subject"] for k, r in rows(db_url).items()} == {"old": "before", "x": "x1", "y": "y1"}


async def test_status_reads_what_the_table_holds_and_none_for_an_unknown_key(handle: Handle, db_url: str) -> None:
    await handle.enqueue(FULL)
    await handle.commit()
    with reader(db_url) as conn:
        conn.execute("UPDATE email_deliveries SET status = 'failed', attempts = 2, last_error = 'bounced: 550',"
                     " delivery_event = 'bounced', delivery_event_at = %s WHERE dedupe_key = 'order-1'", (WHEN,))
    found = await handle.status("order-1")
    assert found is not None
    assert (found.dedupe_key, found.status, found.attempts, found.max_attempts, found.last_error) == (
        "order-1", "failed", 2, 3, "bounced: 550")
    assert (found.sent_at, found.provider_message_id, found.transport) == (None, None, "smtp")
    assert (found.delivery_event, found.delivery_event_at, found.scheduled_at) == ("bounced", WHEN, WHEN)
    assert found.created_at <= found.updated_at
    assert await handle.status("no-such-key") is None


@pytest.mark.parametrize("opened", ["asyncpg pool", "sqlalchemy engine"])
async def test_a_pool_or_an_engine_is_refused_since_it_is_no_transaction(opened: str, db_url: str) -> None:
    email = Email(dedupe_key="k", to=["a@example.com"], subject="s", text="t")
    if opened == "asyncpg pool":
        async with asyncpg.create_pool(db_url, min_size=1, max_size=1) as pool:
            with pytest.raises(TypeError, match="no transaction"):
                await client.enqueue_async(pool, email)
    else:
        engine = sqlalchemy.create_engine(url_for(db_url, "postgresql+psycopg2"))
        with pytest.raises(TypeError, match="no transaction"):
            client.enqueue(engine, email)
        engine.dispose()
    assert rows(db_url) == {}
