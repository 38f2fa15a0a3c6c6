"""The console's Starlette application: routes, security headers, who is asking, error pages.

Every response carries a Content-Security-Policy without inline script and with
``frame-ancestors 'none'`` (the HTML preview, framed by the email's page, has its own, stricter one:
``content.py``), ``X-Content-Type-Options: nosniff``, ``Referrer-Policy: same-origin`` and
``Cache-Control: no-store``. Pages need a signed-in user (or a trusted proxy's); every POST needs
the session's CSRF token and an Origin of this console, and an action needs the operator role:
refusals are 403 and change nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote, unquote

from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..config import Settings
from ..config_checks import parse_listen_address
from ..errors import DatabaseBusy, DatabaseUnavailable
from ..store.console import ConsoleStore
from .auth import (
    LoginThrottle,
    Session,
    Sessions,
    csrf_matches,
    is_loopback,
    proxy_user,
    same_origin,
)
from .census import Census
from .filters import Malformed

log = logging.getLogger("outbox_mailer")
COOKIE = "outbox_console"
PAGE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
            "form-action 'self'; frame-src 'self'; frame-ancestors 'none'; base-uri 'none'")
MAX_FORM_FIELDS = 32


class Refused(Exception):
    """An answer other than the page: 400, 403, 404, 409 with a message for the error page."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class Console:
    """The application's state: settings, the store, sessions, the login throttle, templates."""

    def __init__(self, settings: Settings, store: ConsoleStore, *, slow_seconds: float | None = None) -> None:
        self.settings, self.store = settings, store
        cfg = settings.console
        self.sessions = Sessions(cfg.session_seconds, cfg.idle_seconds)
        self.census = Census(store, settings.default_transport, cfg.census_seconds)
        self.throttle = LoginThrottle()
        self.slow_seconds = slow_seconds  # None: auth.SLOW_SECONDS (tests shorten it)
        self.networks = cfg.proxy_networks()
        host = parse_listen_address(cfg.address)[0] if cfg.address else "127.0.0.1"
        self.secure_cookie = not is_loopback(host)
        self.templates = Environment(loader=PackageLoader("outbox_mailer.console", "templates"), autoescape=True,
                                     undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
        self.templates.filters["key_url"] = key_url
        self.templates.filters["with_query"] = with_query
        self.templates.filters["json"] = lambda v, indent=None: json.dumps(v, indent=indent, ensure_ascii=False,
                                                                           sort_keys=True, default=str)
        self.templates.filters["address_url"] = lambda a: quote(a, safe="")

    # ---- who is asking

    async def session_of(self, request: Request) -> tuple[Session | None, bool]:
        """The request's session, signed in or not, and whether its cookie must be set (new)."""
        cfg = self.settings.console
        token = request.cookies.get(COOKIE)
        if cfg.trusted_proxy_header is not None:
            peer = request.client.host if request.client else None
            user = proxy_user(peer, request.headers.get(cfg.trusted_proxy_header), self.networks)
            if user is not None:
                session = self.sessions.get(token)
                if session is not None and session.user == user:
                    return session, False
                self.sessions.end(token)
                known = await self.store.user(user)
                return self.sessions.start(user, known["role"] if known else cfg.proxy_role, by_proxy=True), True
        session = self.sessions.get(token)
        if session is not None and session.user is not None and not session.by_proxy:
            known = await self.store.user(session.user)  # removed, or given another role, since signing in
            if known is None or known["role"] != session.role:
                self.sessions.end(session.token)
                return None, False
        return session, False

    def set_cookie(self, response: Response, session: Session) -> None:
        response.set_cookie(COOKIE, session.token, httponly=True, samesite="strict", secure=self.secure_cookie,
                            path="/")

    # ---- answers

    def page(self, request: Request, template: str, session: Session | None, status: int = 200,
             **context: Any) -> HTMLResponse:
        html = self.templates.get_template(template).render(
            session=session, csrf=session.csrf if session else "", path=request.url.path,
            operator=session is not None and session.role == "operator", **context)
        return HTMLResponse(html, status_code=status)


DOT_KEY = "~"  # the path segment of the keys "." and "..", which is in the query instead


def key_url(key: str, suffix: str = "") -> str:
    """The URL of an email's page: its dedupe key as one percent-encoded path segment. The keys "."
    and ".." are dot segments however encoded (browsers resolve "%2E%2E" too): their URL is
    ``/emails/~?key=..`` (a URL of the key "~" itself never has a query)."""
    if key in (".", ".."):
        return f"/emails/{DOT_KEY}{suffix}?key={quote(key, safe='')}"
    return "/emails/" + quote(key, safe="") + suffix


def with_query(url: str, query: str) -> str:
    return url + ("&" if "?" in url else "?") + query


def email_key(request: Request, segments: list[str]) -> str:
    """The dedupe key an /emails/... URL names (see :func:`key_url`)."""
    if segments[0] == DOT_KEY and request.query_params.get("key") in (".", ".."):
        return request.query_params["key"]
    return segments[0]


def path_segments(request: Request, prefix: str) -> list[str]:
    """The raw path after ``prefix``, split on '/' before percent-decoding (a key may hold '/')."""
    raw = request.scope.get("raw_path") or request.url.path.encode()
    text = raw.decode("ascii", "replace")
    if not text.startswith(prefix):
        raise Refused(404, "no such page")
    try:
        return [unquote(part, errors="strict") for part in text[len(prefix):].split("/")]
    except UnicodeDecodeError:
        raise Refused(400, "the address is not UTF-8 percent-encoded") from None


Handler = Callable[[Request, Console, Session], Awaitable[Response]]


def signed_in(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """A page for signed-in users: others go to the login page (GET) or get 403 (POST)."""

    async def endpoint(request: Request) -> Response:
        console: Console = request.app.state.console
        session, new = await console.session_of(request)
        if session is None or session.user is None:
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
        if new:
            console.set_cookie(response, session)
        return response

    return endpoint


async def checked_form(request: Request, session: Session | None, *, operator: bool = True) -> FormData:
    """The POST's form, once its origin, CSRF token and (for actions) the operator role are right."""
    if not same_origin(request.headers.get("origin"), request.headers.get("referer"), request.headers.get("host")):
        raise Refused(403, "This request did not come from a page of this console.")
    try:
        form = await request.form(max_files=0, max_fields=MAX_FORM_FIELDS, max_part_size=64 * 1024)
    except Exception:  # starlette's MultiPartException, a body cut short: not a form of ours
        raise Refused(400, "not a form this console sent") from None
    token = form.get("csrf_token")
    if not csrf_matches(session, token if isinstance(token, str) else None):
        raise Refused(403, "The form has expired or did not come from this console: reload the page.")
    if operator and (session is None or session.role != "operator"):
        raise Refused(403, "Only operators may do this.")
    return form


class SecurityHeaders:
    """Pure ASGI middleware: the headers above on every response (a CSP a response set stays)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

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

        await self.app(scope, receive, sending)


async def healthz(request: Request) -> Response:
    return PlainTextResponse("ok\n")


def build_app(console: Console) -> Any:
    from . import actions, pages  # the handlers, which import this module

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
        Route("/suppressions", signed_in(pages.suppressions), methods=["GET"]),
        Route("/suppressions", signed_in(actions.suppress), methods=["POST"]),
        Route("/suppressions/{rest:path}", signed_in(actions.unsuppress), methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Mount("/static", StaticFiles(packages=[("outbox_mailer.console", "static")]), name="static"),
    ]
    app = Starlette(routes=routes)
    app.state.console = console
    return SecurityHeaders(app)
