"""The console's Starlette application: routes, security headers, the refusals before any handler, error pages.

Every response carries a Content-Security-Policy without inline script and with
``frame-ancestors 'none'`` (the HTML preview, framed by the email's page, has its own, stricter one:
``content.py``), ``X-Content-Type-Options: nosniff``, ``Referrer-Policy: same-origin`` and
``Cache-Control: no-store``. A request whose ``Host`` is not an allowed host (DNS rebinding), or whose
path or query holds a NUL, gets 400 before any handler. Pages need a signed-in user (or a trusted
proxy's); every POST needs the session's CSRF token and an Origin of this console (allowed host and
the request's scheme), and an action needs the operator role: refusals are 403 and change nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..errors import DatabaseBusy, DatabaseUnavailable
from . import actions, pages, template_pages
from .auth import Session
from .filters import Malformed
from .web import Console, Refused

log = logging.getLogger("outbox_mailer")
PAGE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
            "form-action 'self'; frame-src 'self'; frame-ancestors 'none'; base-uri 'none'")


Handler = Callable[[Request, Console, Session], Awaitable[Response]]


def signed_in(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """A page for signed-in users: others go to the login page (GET) or get 403 (POST)."""

    async def endpoint(request: Request) -> Response:
        console: Console = request.app.state.console
        session = await console.session_of(request)
        if session is None:
            if request.method != "GET":
                return console.page(request, "error.html", None, 403, message="Sign in first.")
            return RedirectResponse("/login", status_code=303)
        try:
            response = await handler(request, console, session)
        except Refused as exc:
            response = console.page(request, "error.html", session, exc.status, message=exc.message)
        except Malformed as exc:
            response = console.page(request, "error.html", session, 400, message=str(exc))
        except (DatabaseUnavailable, DatabaseBusy) as exc:  # nothing was done; the page says so
            log.warning("console: %s %s: %s", request.method, request.url.path, exc)
            response = console.page(request, "error.html", session, 503,
                                    message="The database cannot answer now; nothing was changed. Try again shortly.")
        return response

    return endpoint


class SecurityHeaders:
    """Pure ASGI middleware: the headers above on every response (a CSP a response set stays), and the
    refusals that come before any handler (:func:`_refusal`)."""

    def __init__(self, app: Any, console: Console) -> None:
        self.app, self.console = app, console

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = _refusal(self.console, scope)

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {name.lower() for name, _ in headers}
                for name, value in ((b"content-security-policy", PAGE_CSP.encode()),
                                    (b"x-content-type-options", b"nosniff"),
                                    (b"referrer-policy", b"same-origin"),
                                    (b"x-frame-options", b"DENY"),
                                    (b"cache-control", b"no-store")):
                    if name not in names:
                        headers.append((name, value))
                message = {**message, "headers": headers}
            await send(message)

        if refusal is not None:
            await PlainTextResponse(refusal + "\n", status_code=400)(scope, receive, sending)
            return
        await self.app(scope, receive, sending)


def _refusal(console: Console, scope: Any) -> str | None:
    """Why a request is refused before any handler: a Host not allowed, a NUL in its path or query."""
    headers = dict(scope.get("headers") or [])
    host = headers.get(b"host", b"").decode("latin-1")
    if not console.host_allowed(host):
        return f"this console does not answer to the host {host!r} (OUTBOX_MAILER_CONSOLE__ALLOWED_HOSTS)"
    if b"%00" in (scope.get("raw_path") or b""):
        return "the address holds a NUL character"
    for name, value in parse_qsl((scope.get("query_string") or b"").decode("latin-1"), keep_blank_values=True):
        if "\x00" in name + value:
            return f"{name}: holds a NUL character"
    return None


async def healthz(request: Request) -> Response:
    return PlainTextResponse("ok\n")


def build_app(console: Console) -> Any:
    routes = [
        Route("/login", actions.login_page, methods=["GET"]),
        Route("/login", actions.login, methods=["POST"]),
        Route("/logout", actions.logout, methods=["POST"]),
        Route("/", signed_in(pages.overview), methods=["GET"]),
        Route("/emails", signed_in(pages.emails), methods=["GET"]),
        Route("/emails/bulk-retry", signed_in(actions.bulk), methods=["POST"]),
        Route("/emails/bulk-cancel", signed_in(actions.bulk), methods=["POST"]),
        Route("/emails/{rest:path}", signed_in(pages.email), methods=["GET"]),
        Route("/emails/{rest:path}", signed_in(actions.email_action), methods=["POST"]),
        Route("/in-doubt", signed_in(pages.in_doubt), methods=["GET"]),
        Route("/templates", signed_in(template_pages.templates), methods=["GET"]),
        Route("/templates/{rest:path}", signed_in(template_pages.template), methods=["GET"]),
        Route("/suppressions", signed_in(pages.suppressions), methods=["GET"]),
        Route("/suppressions", signed_in(actions.suppress), methods=["POST"]),
        Route("/suppressions/{rest:path}", signed_in(actions.unsuppress), methods=["POST"]),
        Route("/transports/pause", signed_in(actions.pause_transport), methods=["POST"]),
        Route("/transports/resume", signed_in(actions.resume_transport), methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Mount("/static", StaticFiles(packages=[("outbox_mailer.console", "static")]), name="static"),
    ]
    app = Starlette(routes=routes)
    app.state.console = console
    return SecurityHeaders(app, console)
