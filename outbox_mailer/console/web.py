"""What every handler of the console shares: the application's state (:class:`Console`: settings, store,
signer, throttle, templates, the render limits of stored templates, cookies, pages), :class:`Refused`, the
URLs of an email's and a stored template's pages, and the checked form of a POST (origin, CSRF token,
operator role)."""

from __future__ import annotations

import json
import logging
import secrets
import time
from typing import Any
from urllib.parse import quote, unquote

from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from ..settings.checks import parse_listen_address
from ..settings.config import Settings
from ..settings.console import allowed_host_names
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
from .throttle import LoginThrottle, SignInGate

log = logging.getLogger("outbox_mailer")
COOKIE, FORM_COOKIE = "outbox_console", "outbox_console_form"  # the session's; the sign-in form's nonce
SECURE_PREFIX = "__Host-"  # the cookies' names over https: Secure, this host only, path /
REFRESH_HEADER = "x-console-refresh"  # refresh.js's requests: not activity (a forgotten tab ends idle)
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
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
        self.render_limits = settings.render_limits()  # the daemon's limits
        self.slow_seconds = slow_seconds  # None: throttle.SLOW_SECONDS (tests shorten it)
        self.proxy_networks, self.forwarding = cfg.proxy_networks(), cfg.forwarding_networks()
        host = parse_listen_address(cfg.address)[0] if cfg.address else "127.0.0.1"
        self.loopback = is_loopback(host)
        self.allowed_hosts = (allowed_host_names(cfg.allowed_hosts) if cfg.allowed_hosts
                              else (*LOOPBACK_NAMES, host.lower()))
        self.templates = Environment(loader=PackageLoader("outbox_mailer.console", "templates"), autoescape=True,
                                     undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
        self.templates.filters["key_url"] = key_url
        self.templates.filters["template_url"] = template_url
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
                              request.url.scheme, proxies=self.forwarding,
                              unix=self.settings.console.socket is not None, scheme=self.settings.console.scheme)

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


DOT_KEY = "~"  # the path segment of the keys (and template names) "." and "..", which are in the query instead


def segment_url(base: str, value: str, suffix: str = "", param: str = "key") -> str:
    """The URL of the page of ``value`` under ``base``: ``value`` as one percent-encoded path segment.
    The values "." and ".." are dot segments however encoded (browsers resolve "%2E%2E" too): their URL
    is ``base + "~?" + param + "=.."`` (a URL of the value "~" itself never has that query)."""
    if value in (".", ".."):
        return f"{base}{DOT_KEY}{suffix}?{param}={quote(value, safe='')}"
    return base + quote(value, safe="") + suffix


def key_url(key: str, suffix: str = "") -> str:
    """The URL of an email's page (``/emails/~?key=..`` for the keys "." and "..")."""
    return segment_url("/emails/", key, suffix)


def template_url(name: str, suffix: str = "") -> str:
    """The URL of a stored template's page (``/templates/~?name=..`` for the names "." and "..")."""
    return segment_url("/templates/", name, suffix, "name")


def with_query(url: str, query: str) -> str:
    return url + ("&" if "?" in url else "?") + query


def segment_value(request: Request, segments: list[str], param: str = "key") -> str:
    """The value a URL of :func:`segment_url` names (a dedupe key, a template's name)."""
    if segments[0] == DOT_KEY and request.query_params.get(param) in (".", ".."):
        return request.query_params[param]
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
    except Exception:  # noqa: BLE001  (starlette's MultiPartException, a body cut short: not a form of ours)
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
