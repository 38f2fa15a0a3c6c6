"""The console's Starlette application: routes, security headers, who is asking, error pages.

Every response carries a Content-Security-Policy without inline script and with
``frame-ancestors 'none'`` (the HTML preview, framed by the email's page, has its own, stricter one:
``content.py``), ``X-Content-Type-Options: nosniff``, ``Referrer-Policy: same-origin`` and
``Cache-Control: no-store``. A request whose ``Host`` is not an allowed host (DNS rebinding), or whose
path or query holds a NUL, gets 400 before any handler. Pages need a signed-in user (or a trusted
proxy's); every POST needs the session's CSRF token and an Origin of this console (allowed host and
the request's scheme), and an action needs the operator role: refusals are 403 and change nothing.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl, quote, unquote

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
from ..console_settings import allowed_host_names
from ..errors import DatabaseBusy, DatabaseUnavailable
from ..store.console import ConsoleStore
from .auth import (
    Session,
    Signer,
    csrf_matches,
    is_loopback,
    proxy_csrf,
    proxy_user,
    same_origin,
    session_csrf,
    token_hash,
)
from .census import Census
from .clients import Origin, in_networks, request_origin
from .filters import Malformed
from .throttle import LoginThrottle, SignInGate

log = logging.getLogger("outbox_mailer")
COOKIE, FORM_COOKIE = "outbox_console", "outbox_console_form"  # the session's; the sign-in form's nonce
SECURE_PREFIX = "__Host-"  # the cookies' names over https: Secure, this host only, path /
REFRESH_HEADER = "x-console-refresh"  # refresh.js's requests: not activity (a forgotten tab ends idle)
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
PAGE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
            "form-action 'self'; frame-src 'self'; frame-ancestors 'none'; base-uri 'none'")
MAX_FORM_FIELDS = 32


class Refused(Exception):
    """An answer other than the page: 400, 403, 404, 409 with a message for the error page."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class Console:
    """The application's state: settings, the store, the signer, the login throttle and gate, templates."""

    def __init__(self, settings: Settings, store: ConsoleStore, *, slow_seconds: float | None = None) -> None:
        self.settings, self.store = settings, store
        cfg = settings.console
        self.census = Census(store, settings.default_transport, cfg.census_seconds)
        self.signer = Signer.from_setting(cfg.signing_key.get_secret_value() if cfg.signing_key else None)
        self.throttle = LoginThrottle()
        self.gate = SignInGate(cfg.sign_in_concurrency, cfg.sign_in_queue, cfg.sign_in_per_client)
        self.slow_seconds = slow_seconds  # None: throttle.SLOW_SECONDS (tests shorten it)
        self.proxy_networks, self.forwarding = cfg.proxy_networks(), cfg.forwarding_networks()
        host = parse_listen_address(cfg.address)[0] if cfg.address else "127.0.0.1"
        self.loopback = is_loopback(host)
        self.allowed_hosts = (allowed_host_names(cfg.allowed_hosts) if cfg.allowed_hosts
                              else (*LOOPBACK_NAMES, host.lower()))
        self.templates = Environment(loader=PackageLoader("outbox_mailer.console", "templates"), autoescape=True,
                                     undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
        self.templates.filters["key_url"] = key_url
        self.templates.filters["with_query"] = with_query
        self.templates.filters["json"] = lambda v, indent=None: json.dumps(v, indent=indent, ensure_ascii=False,
                                                                           sort_keys=True, default=str)
        self.templates.filters["address_url"] = lambda a: quote(a, safe="")

    # ---- where from

    def host_allowed(self, host: str | None) -> bool:
        if not host:
            return False
        host = host.lower()
        name = host.rsplit(":", 1)[0] if host.rfind(":") > host.rfind("]") else host
        return host in self.allowed_hosts or name in self.allowed_hosts

    def origin(self, request: Request) -> Origin:
        return request_origin(request.client.host if request.client else None,
                              request.headers.get("x-forwarded-for"), request.headers.get("x-forwarded-proto"),
                              request.url.scheme, proxies=self.forwarding, unix=self.settings.console.socket is not None,
                              scheme=self.settings.console.scheme)

    # ---- who is asking

    async def session_of(self, request: Request) -> Session | None:
        """The request's signed-in user: the trusted proxy's (named again by every request, no cookie),
        or the session of its cookie (re-read: ended once the user is removed or has another role)."""
        cfg = self.settings.console
        if cfg.trusted_proxy_header is not None:
            peer = request.client.host if request.client else None
            if (peer is None and cfg.socket is not None) or in_networks(peer, self.proxy_networks):
                user = proxy_user(request.headers.get(cfg.trusted_proxy_header))
                if user is not None:
                    known = await self.store.user(user)
                    return Session(user, known["role"] if known else cfg.proxy_role, proxy_csrf(self.signer, user))
        token = request.cookies.get(self.cookie_name(COOKIE, self.origin(request)))
        if not token or len(token) > 128:
            return None
        hashed = token_hash(token)
        found = await self.store.session(hashed, session_seconds=cfg.session_seconds, idle_seconds=cfg.idle_seconds,
                                         seen=request.headers.get(REFRESH_HEADER) != "1")
        return Session(found[0], found[1], session_csrf(self.signer, hashed), hashed) if found else None

    async def start_session(self, user: str, role: str) -> tuple[Session, str]:
        """A new session and its token (for the cookie)."""
        token = secrets.token_urlsafe(32)
        hashed = token_hash(token)
        cfg = self.settings.console
        await self.store.start_session(hashed, user, role, session_seconds=cfg.session_seconds,
                                       idle_seconds=cfg.idle_seconds)
        return Session(user, role, session_csrf(self.signer, hashed), hashed), token

    def cookie_name(self, name: str, origin: Origin) -> str:
        return SECURE_PREFIX + name if origin.scheme == "https" else name

    def set_cookie(self, response: Response, origin: Origin, name: str, value: str) -> None:
        response.set_cookie(self.cookie_name(name, origin), value, httponly=True, samesite="strict", path="/",
                            secure=origin.scheme == "https" or not self.loopback)

    def delete_cookie(self, response: Response, origin: Origin, name: str) -> None:
        response.delete_cookie(self.cookie_name(name, origin), path="/", httponly=True, samesite="strict",
                               secure=origin.scheme == "https" or not self.loopback)

    # ---- answers

    def page(self, request: Request, template: str, session: Session | None, status: int = 200,
             csrf: str | None = None, **context: Any) -> HTMLResponse:
        html = self.templates.get_template(template).render(
            session=session, csrf=csrf if csrf is not None else session.csrf if session else "",
            path=request.url.path, operator=session is not None and session.role == "operator", **context)
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


async def checked_form(request: Request, session: Session | None, *, operator: bool = True,
                       sign_in: bool = False) -> FormData:
    """The POST's form, once its origin, CSRF token and (for actions) the operator role are right.
    ``sign_in``: the sign-in form, whose token is signed and bound to its own cookie."""
    console: Console = request.app.state.console
    origin = console.origin(request)
    if not same_origin(request.headers.get("origin"), request.headers.get("referer"), request.headers["host"],
                       origin.scheme):
        raise Refused(403, "This request did not come from a page of this console.")
    try:
        form = await request.form(max_files=0, max_fields=MAX_FORM_FIELDS, max_part_size=64 * 1024)
    except Exception:  # starlette's MultiPartException, a body cut short: not a form of ours
        raise Refused(400, "not a form this console sent") from None
    if any(isinstance(v, str) and "\x00" in v for v in form.values()):
        raise Refused(400, "a form field holds a NUL character")
    token = form.get("csrf_token")
    token = token if isinstance(token, str) else None
    if sign_in:
        nonce = request.cookies.get(console.cookie_name(FORM_COOKIE, origin))
        if not console.signer.form_token_valid(nonce, token, time.time()):
            raise Refused(403, "The form has expired or did not come from this console: reload the page.")
    elif not csrf_matches(session, token):
        raise Refused(403, "The form has expired or did not come from this console: reload the page.")
    if operator and (session is None or session.role != "operator"):
        raise Refused(403, "Only operators may do this.")
    return form


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
    return SecurityHeaders(app, console)
