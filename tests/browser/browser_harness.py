"""What the browser tests share: signing in through the form, a canary HTTP server that counts the
requests it gets, keyboard walks (Tab from the top of a page), axe-core's checks and screenshots."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.console_harness import PASSWORD

HERE = Path(__file__).resolve().parent
CHROMIUM = os.environ.get("OUTBOX_MAILER_TEST_CHROMIUM", "/usr/bin/chromium")
AXE = HERE / "node_modules" / "axe-core" / "axe.min.js"
SCREENSHOTS = HERE / "screenshots"
# Playwright's own browser download is not used: Debian's chromium, headless, and quiet on the network
# (without the background-networking flags it keeps calling Google's services).
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1280, "height": 900}


async def sign_in(page: Any, user: str, password: str = PASSWORD) -> None:
    """Sign in through the login form, as a person would, and land on the overview."""
    await page.goto("/login")
    await page.get_by_label("User name").fill(user)
    await page.get_by_label("Password").fill(password)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url("**/")
    assert await page.locator(".who").text_content() == f"{user} ({'operator' if user == 'olga' else 'viewer'})"


async def csrf_of(page: Any) -> str:
    """The CSRF token of the page's forms (every signed-in page has one: the sign-out form's)."""
    return await page.locator('input[name="csrf_token"]').first.get_attribute("value")


# ---- a canary: any request to it means the page loaded something it must not


class Canary:
    """A loopback HTTP server that answers every request with an empty 200 and remembers its path."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self._lock = threading.Lock()
        canary = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                with canary._lock:
                    canary.paths.append(self.path)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = do_HEAD = do_OPTIONS = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def requests(self) -> list[str]:
        with self._lock:
            return list(self.paths)


@contextlib.contextmanager
def canary_server() -> Iterator[Canary]:
    canary = Canary()
    thread = threading.Thread(target=canary.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield canary
    finally:
        canary.server.shutdown()
        canary.server.server_close()
        thread.join(5)


# ---- the keyboard

_ACTIVE = """() => {
  const el = document.activeElement;
  if (!el || el === document.body) { return null; }
  const style = getComputedStyle(el);
  const box = el.getBoundingClientRect();
  return {tag: el.tagName, index: [...document.querySelectorAll("*")].indexOf(el),
          text: (el.innerText || el.value || el.getAttribute("aria-label") || el.id || "").trim(),
          outline: style.outlineStyle !== "none" && parseFloat(style.outlineWidth) > 0,
          visible: box.width > 0 && box.height > 0 && style.visibility !== "hidden"};
}"""


async def focused(page: Any) -> dict[str, Any] | None:
    """The focused element: its tag, index in the document, text, whether it shows a focus outline and
    is visible (None: nothing, or the focus left the page for the browser's own controls)."""
    return await page.evaluate(_ACTIVE)


async def tab_to(page: Any, selector: str, *, limit: int = 120) -> None:
    """Press Tab until the element ``selector`` names has the focus (AssertionError after ``limit`` presses)."""
    for _ in range(limit):
        if await page.evaluate("s => !!document.activeElement && document.activeElement.matches(s)", selector):
            return
        await page.keyboard.press("Tab")
    raise AssertionError(f"{selector} is not reached by {limit} presses of Tab")


async def tab_stops(page: Any, *, limit: int = 400) -> list[dict[str, Any]]:
    """Every element Tab reaches, in order, going once round the page (past its end, the focus leaves
    for the browser's controls and comes back at the top): a frame is one stop however many of its
    own links Tab walks through."""
    stops: list[dict[str, Any]] = []
    for _ in range(limit):
        await page.keyboard.press("Tab")
        if stops and stops[-1]["tag"] != "IFRAME":  # (inside a frame, Tab may stay on it: nothing to wait for)
            await _focus_moved_from(page, stops[-1]["index"])
        here = await focused(page)
        if here is None:
            continue
        if stops and here["index"] == stops[0]["index"]:
            return stops
        if not stops or here["index"] != stops[-1]["index"]:
            stops.append(here)
    raise AssertionError(f"the focus did not come round after {limit} presses of Tab: a keyboard trap?")


_MOVED = """i => { const el = document.activeElement;
  return !!el && el !== document.body && [...document.querySelectorAll("*")].indexOf(el) !== i; }"""


async def _focus_moved_from(page: Any, index: int) -> None:
    """Wait (at most a second) for the focus to leave the element at ``index`` for another element of the
    page. Into a sandboxed frame, rendered by another process, the focus moves after the key press has
    returned: read at once, the page showed no focused element, and the next Tab passed the frame by.
    Past the page's last control the focus leaves for the browser: then the wait ends by its timeout."""
    from playwright.async_api import TimeoutError as PlaywrightTimeout  # (conftest.py: optional without CI)

    with contextlib.suppress(PlaywrightTimeout):  # the focus left the page
        await page.wait_for_function(_MOVED, arg=index, timeout=1_000)


async def interactive_count(page: Any) -> int:
    """How many visible, enabled links, buttons, fields and frames the page has (what Tab must reach)."""
    return await page.evaluate("""() => [...document.querySelectorAll(
        'a[href], button, input:not([type=hidden]), select, textarea, summary, iframe')]
        .filter(el => !el.disabled && el.getClientRects().length > 0 && getComputedStyle(el).visibility !== 'hidden')
        .length""")


# ---- axe-core, screenshots


async def axe_violations(page: Any, axe_source: str) -> list[str]:
    """axe-core's serious and critical violations of the page (one line each), frames not entered: the
    one frame is the email's own sandboxed HTML, which no script may enter."""
    if not await page.evaluate("() => typeof window.axe !== 'undefined'"):
        await page.add_script_tag(content=axe_source)
    result = await page.evaluate("() => axe.run(document, {iframes: false, resultTypes: ['violations']})")
    return [f"{v['id']} ({v['impact']}): {v['help']}: " + "; ".join(n["target"][0] for n in v["nodes"][:5])
            for v in result["violations"] if v["impact"] in ("serious", "critical")]


async def screenshot(page: Any, name: str) -> None:
    """tests/browser/screenshots/NAME.png, the whole page. The viewport is made as tall as the page for
    it: chromium's full-page capture leaves out-of-process frames (the sandboxed HTML body) blank."""
    SCREENSHOTS.mkdir(exist_ok=True)
    height = await page.evaluate("() => document.documentElement.scrollHeight")
    await page.set_viewport_size({"width": VIEWPORT["width"], "height": max(height, VIEWPORT["height"])})
    try:
        await page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
        await page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))
    finally:
        await page.set_viewport_size(VIEWPORT)
