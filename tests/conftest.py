"""Shared fixtures: one throwaway PostgreSQL for the whole session, a fresh
migrated database per test (cloned from a template in a few milliseconds).

Set OUTBOX_MAILER_TEST_DATABASE_URL to use an existing server instead; the
role needs CREATEDB.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import anyio
import psycopg
import pytest

from outbox_mailer.migrations import load_migrations
from outbox_mailer.pgcluster import TemporaryPostgres
from outbox_mailer.store import Store

TEMPLATE = "outbox_mailer_template"


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


def with_database(url: str, dbname: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + dbname))


def psql(url: str, command: str) -> None:
    subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", url, "-c", command], check=True,
                   capture_output=True, timeout=60)


_ADMIN: dict[str, psycopg.Connection] = {}


def admin_sql(url: str, command: str) -> None:
    """``command`` (CREATE or DROP DATABASE: autocommit) on a connection to ``url`` kept for the
    session: a psql process for each of the two per test took ~0.1 s. Opened again once if broken."""
    for retry in (False, True):
        conn = _ADMIN.get(url)
        if conn is None or conn.closed:
            conn = _ADMIN[url] = psycopg.connect(url, autocommit=True, connect_timeout=10)
        try:
            conn.execute(command)  # type: ignore[arg-type]  (our own statements, no parameters)
            return
        except psycopg.OperationalError:
            conn.close()
            if retry:
                raise


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """URL of a server (maintenance database) the tests may create databases on."""
    external = os.environ.get("OUTBOX_MAILER_TEST_DATABASE_URL")
    with contextlib.ExitStack() as stack:
        url = external or stack.enter_context(TemporaryPostgres()).url
        try:
            yield url
        finally:
            while _ADMIN:
                _ADMIN.popitem()[1].close()


@pytest.fixture(scope="session")
def template_db(pg_server: str) -> str:
    admin_sql(pg_server, f"DROP DATABASE IF EXISTS {TEMPLATE}")
    admin_sql(pg_server, f"CREATE DATABASE {TEMPLATE}")
    url = with_database(pg_server, TEMPLATE)

    async def migrate() -> None:
        store = await Store.open(url)
        try:
            await store.migrate(load_migrations())
        finally:
            await store.close()

    anyio.run(migrate)
    return TEMPLATE


@contextlib.contextmanager
def cloned_database(pg_server: str, template_db: str) -> Iterator[str]:
    """A freshly migrated, empty database (a clone of the template), dropped at exit."""
    name = "t_" + uuid.uuid4().hex[:12]
    admin_sql(pg_server, f"CREATE DATABASE {name} TEMPLATE {template_db}")
    try:
        yield with_database(pg_server, name)
    finally:
        admin_sql(pg_server, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def db_url(pg_server: str, template_db: str) -> Iterator[str]:
    """A freshly migrated, empty database for one test."""
    with cloned_database(pg_server, template_db) as url:
        yield url


@pytest.fixture
def empty_db_url(pg_server: str) -> Iterator[str]:
    """A database without the schema."""
    name = "e_" + uuid.uuid4().hex[:12]
    admin_sql(pg_server, f"CREATE DATABASE {name}")
    yield with_database(pg_server, name)
    admin_sql(pg_server, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
