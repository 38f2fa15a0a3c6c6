"""What operators change (POST): sign-in and sign-out, retry, cancel and resolve of one email (the CLI's
own :class:`Store` methods), bulk retry and cancel of a filtered selection, suppressions, transport
pauses. Every change is a row of email_operator_actions written in its transaction, and a line of the log."""

from __future__ import annotations

import logging
import secrets
import time
from datetime import timedelta
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..clock import utc_now
from ..delivery_events.suppression import REASONS, normal_address
from ..errors import InvalidTransition, NotFound
from ..store.console import MAX_BULK, Actor, BulkAction, SelectionChanged
from .auth import Session
from .filters import Malformed, parse_count, parse_filter
from .throttle import SLOW_SECONDS, GateFull
from .web import (
    COOKIE,
    FORM_COOKIE,
    Console,
    Refused,
    checked_form,
    key_url,
    path_segments,
    segment_value,
    with_query,
)

log = logging.getLogger("outbox_mailer")
EXPIRY_DAYS_MAX = 3650
PAUSE_MINUTES_MAX = 525_600  # a year
MAX_REASON = 1000  # characters (the table's check)


# ---- signing in and out


def _login_form(request: Request, console: Console, status: int = 200, error: str | None = None) -> Response:
    """The sign-in page, its token signed and bound to the nonce of its cookie (set when missing)."""
    origin = console.origin(request)
    cookie = request.cookies.get(console.cookie_name(FORM_COOKIE, origin)) or ""
    fresh = not cookie or len(cookie) > 64
    nonce = secrets.token_urlsafe(24) if fresh else cookie
    response = console.page(request, "login.html", None, status, csrf=console.signer.form_token(nonce, time.time()),
                            error=error)
    if fresh:
        console.set_cookie(response, origin, FORM_COOKIE, nonce)
    return response


async def login_page(request: Request) -> Response:
    console: Console = request.app.state.console
    if await console.session_of(request) is not None:
        return RedirectResponse("/", status_code=303)
    return _login_form(request, console)


async def login(request: Request) -> Response:
    console: Console = request.app.state.console
    try:
        form = await checked_form(request, None, operator=False, sign_in=True)
    except Refused as exc:
        return console.page(request, "error.html", None, exc.status, message=exc.message)
    user, password = form.get("username"), form.get("password")
    if not isinstance(user, str) or not isinstance(password, str) or not user or len(user) > 64:
        return _login_form(request, console, 400, "Enter a user name and a password.")
    origin = console.origin(request)
    attempt = console.throttle.begin(user, origin.address)
    if attempt is None:
        log.warning("console: sign-in refused for %r from %s: too many failures", user, origin.address)
        return _login_form(request, console, 429,
                           "Too many failed sign-ins from your address. Try again in 15 minutes.")
    if attempt.slow_steps:
        await anyio.sleep((SLOW_SECONDS if console.slow_seconds is None else console.slow_seconds) * attempt.slow_steps)
    stored = await console.store.password_hash(user)
    try:
        right = await console.gate.verify(origin.address, stored, password)
    except GateFull:
        console.throttle.forgive(attempt)
        log.warning("console: sign-in of %r from %s not checked: too many sign-ins at once", user, origin.address)
        return _login_form(request, console, 429, "Too many sign-ins at once. Try again in a few seconds.")
    known = await console.store.user(user) if right else None
    if known is None:
        log.warning("console: failed sign-in for %r from %s", user, origin.address)
        return _login_form(request, console, 401, "Wrong user name or password.")
    console.throttle.succeeded(attempt)
    old = await console.session_of(request)
    if old is not None and old.token_hash is not None:
        await console.store.end_session(old.token_hash)
    signed, token = await console.start_session(known["name"], known["role"])
    log.info("console: %s signed in (%s) from %s", signed.user, signed.role, origin.address)
    response = RedirectResponse("/", status_code=303)
    console.set_cookie(response, origin, COOKIE, token)
    console.delete_cookie(response, origin, FORM_COOKIE)
    return response


async def logout(request: Request) -> Response:
    console: Console = request.app.state.console
    session = await console.session_of(request)
    try:
        await checked_form(request, session, operator=False)
    except Refused as exc:
        return console.page(request, "error.html", None, exc.status, message=exc.message)
    if session is not None and session.token_hash is not None:
        await console.store.end_session(session.token_hash)
    response = RedirectResponse("/login", status_code=303)
    console.delete_cookie(response, console.origin(request), COOKIE)
    return response


# ---- one email


def actor_of(session: Session) -> Actor:
    return Actor(session.token_hash, session.user, session.role)



async def email_action(request: Request, console: Console, session: Session) -> Response:
    form = await checked_form(request, session)
    segments = path_segments(request, "/emails/")
    if len(segments) != 2 or segments[1] not in ("retry", "cancel", "resolve"):
        raise Refused(404, "no such action")
    key, action = segment_value(request, segments), segments[1]
    store, default_attempts = console.store, console.settings.max_attempts
    outcome: str | None = None
    detail: dict[str, Any] = {}
    if action == "resolve":
        given = form.get("as")
        if given not in ("sent", "failed"):
            raise Malformed("as: sent or failed")
        outcome = str(given)
        detail = {"as": outcome}
    elif action == "retry":
        rows = await store.status([key])
        detail = {"attempts": rows[0]["max_attempts"] or default_attempts} if rows else {}  # as `retry KEY` gives
    try:
        await store.act_on(actor_of(session), action, key, outcome=outcome, default_attempts=default_attempts,
                           detail=detail)
    except NotFound:
        raise Refused(404, f"No email has the dedupe key {key!r}.") from None
    except InvalidTransition as exc:
        raise Refused(409, f"Nothing was done: {exc}") from None
    console.census.expire()
    log.info("console: %s did %s on %r", session.user, action, key)
    back = "/in-doubt" if form.get("back") == "in-doubt" else with_query(key_url(key), f"done={action}")
    return RedirectResponse(back, status_code=303)


async def bulk(request: Request, console: Console, session: Session) -> Response:
    form = await checked_form(request, session)
    action: BulkAction = "retry" if request.url.path.endswith("retry") else "cancel"
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    f = parse_filter(fields)
    expected = parse_count(fields.get("expected_count"))
    if expected > MAX_BULK:
        raise Refused(400, f"A bulk action changes at most {MAX_BULK} emails; narrow the filter.")
    try:
        keys = await console.store.bulk(f, console.settings.default_transport, action, expected=expected,
                                        actor=actor_of(session), default_attempts=console.settings.max_attempts)
    except SelectionChanged as exc:
        raise Refused(409, f"{exc}. Look at the list again and confirm the new count.") from None
    console.census.expire()
    log.info("console: %s did bulk %s on %d emails", session.user, action, len(keys))
    return console.page(request, "bulk_done.html", session, action=action, keys=keys)


# ---- suppressions


async def suppress(request: Request, console: Console, session: Session) -> Response:
    form = await checked_form(request, session)
    raw, reason, days = form.get("address"), form.get("reason") or "manual", form.get("expires_days") or ""
    if not isinstance(raw, str) or reason not in REASONS or not isinstance(days, str):
        raise Malformed("address, reason (one of " + ", ".join(REASONS) + ") and expires_days")
    try:
        address = normal_address(raw)
    except ValueError as exc:
        raise Malformed(f"address: {exc}") from None
    expires = None
    if days:
        if not days.isdigit() or not 1 <= int(days) <= EXPIRY_DAYS_MAX:
            raise Malformed(f"expires_days: a whole number of days from 1 to {EXPIRY_DAYS_MAX}, or empty for never")
        expires = utc_now() + timedelta(days=int(days))
    await console.store.console_suppress(actor_of(session), address, str(reason), expires)
    log.info("console: %s suppressed %s (%s)", session.user, address, reason)
    return RedirectResponse("/suppressions", status_code=303)


async def unsuppress(request: Request, console: Console, session: Session) -> Response:
    await checked_form(request, session)
    segments = path_segments(request, "/suppressions/")
    if len(segments) != 2 or segments[1] != "delete":
        raise Refused(404, "no such action")
    if not await console.store.console_unsuppress(actor_of(session), segments[0]):
        raise Refused(404, f"{segments[0]} is not suppressed.")
    log.info("console: %s unsuppressed %s", session.user, segments[0])
    return RedirectResponse("/suppressions", status_code=303)


# ---- transport pauses


def _transport(console: Console, form: Any) -> str:
    name = form.get("transport")
    configured = sorted(console.settings.all_transports())
    if not isinstance(name, str) or name not in configured:
        raise Refused(404, f"No transport is named {name!r}; the configured ones: {', '.join(configured)}.")
    return name


async def pause_transport(request: Request, console: Console, session: Session) -> Response:
    form = await checked_form(request, session)
    transport = _transport(console, form)
    minutes, reason = form.get("minutes") or "", form.get("reason") or ""
    if not isinstance(minutes, str) or not isinstance(reason, str) or len(reason) > MAX_REASON:
        raise Malformed(f"minutes and reason (at most {MAX_REASON} characters)")
    until = None
    if minutes:
        if not minutes.isdigit() or not 1 <= int(minutes) <= PAUSE_MINUTES_MAX:
            raise Malformed(f"minutes: a whole number from 1 to {PAUSE_MINUTES_MAX}, or empty for until resumed")
        until = utc_now() + timedelta(minutes=int(minutes))
    await console.store.console_pause(actor_of(session), transport, reason, until)
    log.warning("console: %s paused transport %s (%s)", session.user, transport, reason or "no reason given")
    return RedirectResponse("/", status_code=303)


async def resume_transport(request: Request, console: Console, session: Session) -> Response:
    form = await checked_form(request, session)
    transport = _transport(console, form)
    if not await console.store.console_resume(actor_of(session), transport):
        raise Refused(404, f"Transport {transport} is not paused.")
    log.warning("console: %s resumed transport %s", session.user, transport)
    return RedirectResponse("/", status_code=303)
