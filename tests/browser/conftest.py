"""Fixtures for the console in a real browser: Debian's chromium driven by Playwright (one browser for
the session, a fresh context per test), the console served on loopback in the test's event loop, and
the daemon (tests/in_process_daemon.py's ``running``) sending to an aiosmtpd server.

Without chromium or axe-core the tests skip, without Playwright (the test extra) they are not
collected; with CI set each is a failure instead (.ci/run installs them: apt's chromium, ``npm ci`` in
tests/browser, the test extra)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any, NoReturn

import pytest

from tests.browser.browser_harness import AXE, CHROMIUM, CHROMIUM_ARGS, VIEWPORT
from tests.console_harness import Served, served_console

try:
    from playwright.async_api import async_playwright
except ImportError:  # the test extra is not installed: nothing here can run (with CI set: a failure)
    if os.environ.get("CI"):
        raise
    collect_ignore_glob = ["test_*.py"]


def unavailable(problem: str) -> NoReturn:
    """Something the browser tests need is missing: skip, or fail when CI is set (.ci/run installs it)."""
    if os.environ.get("CI"):
        pytest.fail(f"{problem}; CI is set, so this is a failure, not a skip")
    pytest.skip(problem)


@pytest.fixture(scope="session")
def axe_source() -> str:
    if not AXE.exists():
        unavailable(f"{AXE} is missing: run `npm ci` in tests/browser")
    return AXE.read_text(encoding="utf-8")


@pytest.fixture(scope="session")
async def browser(anyio_backend: str) -> AsyncIterator[Any]:
    """One chromium for the whole session, in the session's event loop (anyio_backend is session-scoped)."""
    if not os.access(CHROMIUM, os.X_OK):
        unavailable(f"{CHROMIUM} is missing (Debian: apt-get install chromium)")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=60_000)
        yield browser
        await browser.close()


@pytest.fixture
async def console(db_url: str) -> AsyncIterator[Served]:
    """The console over the test's database, with the operator olga and the viewer victor."""
    async with served_console(db_url, max_attempts=3) as served:
        yield served


@pytest.fixture
async def new_context(browser: Any, console: Served) -> AsyncIterator[Any]:
    """new_context(**options): a browser context on the console (closed at the end of the test)."""
    contexts: list[Any] = []

    async def factory(**options: Any) -> Any:
        context = await browser.new_context(base_url=console.base, viewport=VIEWPORT, **options)
        context.set_default_timeout(5_000)
        contexts.append(context)
        return context

    yield factory
    for context in contexts:
        await context.close()


@pytest.fixture
async def page(new_context: Any) -> Any:
    """A page in a context with the console's own Content-Security-Policy in force."""
    return await (await new_context()).new_page()
