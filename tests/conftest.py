"""Shared fixtures: one throwaway PostgreSQL for the whole session, a fresh
migrated database per test (cloned from a template in a few milliseconds).

Set OUTBOX_MAILER_TEST_DATABASE_URL to use an existing server instead; the
role needs CREATEDB.

The suite runs in two processes (``-n 2``, pytest-xdist): each starts its own PostgreSQL, and on a
shared server each has a template of its own. Measured figures (tests/e2e/chaos.py) are collected
here from the test reports, which reach this process from either worker, for the terminal summary.

Fixtures used in more than one directory are registered here once, as plugins (``pytest_plugins``,
which pytest reads only in this root conftest): the SMTP server, the fake provider server, the daemon
run in-process, and the process fleet of the chaos tests with its figures. Fixtures used in one
directory are in that directory's conftest.py; a test module never imports a fixture.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import anyio
import psycopg
import pytest

from outbox_mailer.devtools.pgcluster import TemporaryPostgres
from outbox_mailer.store import Store
from outbox_mailer.store.migrations import load_migrations

# one template per pytest-xdist worker (gw0, gw1...): with OUTBOX_MAILER_TEST_DATABASE_URL they share a server
TEMPLATE = "outbox_mailer_template" + (f"_{worker}" if (worker := os.environ.get("PYTEST_XDIST_WORKER")) else "")
FIGURES_KEYWORD = "outbox_mailer_figures"  # set on a test that records figures (tests/e2e/chaos.py)
_FIGURES: list[str] = []

pytest_plugins = [
    "tests.smtp_server",  # smtp_server
    "tests.provider_server",  # provider_server
    "tests.in_process_daemon",  # store, start, running
    "tests.e2e.chaos",  # fleet, figures
    "tests.otel_spans",  # spans
]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "alone: timing-sensitive; under pytest-xdist no other test runs meanwhile")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Under pytest-xdist, a test marked ``alone`` (a rate or latency bound with a tight tolerance) runs
    while the other worker waits, and every other test shares: a readers-writer lock on files in the
    run's temp dir, with a turnstile so that a waiting ``alone`` test is not starved. Setup and teardown
    are inside it."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    shared = item.config._tmp_path_factory.getbasetemp().parent  # type: ignore[attr-defined]  (the run's dir)
    alone = item.get_closest_marker("alone") is not None
    with open(shared / "alone.turnstile", "a") as turnstile, open(shared / "alone.lock", "a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
        yield  # both released when the files close


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """The figures a test recorded (its user properties), once it is over; in the main process the
    reports of both workers arrive here."""
    if report.when == "teardown" and FIGURES_KEYWORD in report.keywords:
        test = report.nodeid.rpartition("::")[2]
        _FIGURES.extend(f"{test}: {name} = {value}" for name, value in report.user_properties)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _FIGURES:
        terminalreporter.section("chaos figures")
        for line in _FIGURES:
            terminalreporter.write_line(line)


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
