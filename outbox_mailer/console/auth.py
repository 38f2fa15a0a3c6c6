"""Who is asking: passwords (Argon2id), sessions, CSRF tokens, the login throttle, the trusted proxy.

* **Passwords** are Argon2id hashes (argon2-cffi's defaults: 64 MiB, 3 passes, 4 lanes), checked off
  the event loop. A name with no user is checked against a hash of nothing, so a wrong name and a
  wrong password take the same time and get the same answer.
* **Sessions** live in the console's memory: a random token in an ``HttpOnly; SameSite=Strict``
  cookie, ended by ``POST /logout``, by ``session_seconds`` after sign-in, by ``idle_seconds``
  without a request, by a restart, and at the next request once the user is removed or given
  another role (each request reads the user's row). Signing in replaces the session (no fixation).
* **CSRF**: each session, the anonymous one of the login page included, has a token that every
  state-changing form carries as ``csrf_token``; it is compared in constant time, and the
  request's ``Origin`` (or, without one, ``Referer``) must name this host.
* **Login throttle**: failures are counted per user name and per client address over
  ``THROTTLE_WINDOW_SECONDS``; from ``SLOW_AFTER`` failures each answer is delayed, from
  ``REFUSE_AFTER`` sign-in is refused (429) until the window has passed, whatever the password.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import anyio
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

ROLES = ("viewer", "operator")
MIN_PASSWORD, MAX_PASSWORD = 12, 1024  # characters
THROTTLE_WINDOW_SECONDS = 900.0
SLOW_AFTER, REFUSE_AFTER = 3, 10  # failures in the window, per user name or per address
SLOW_SECONDS = 1.0  # the delay from SLOW_AFTER failures on
MAX_SESSIONS = 10_000  # the oldest go first beyond this (anonymous login-page sessions are many)

_hasher = PasswordHasher()
_NOBODY = _hasher.hash(secrets.token_urlsafe(16))


def check_password_rules(password: str) -> str:
    if not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
        raise ValueError(f"a password has {MIN_PASSWORD} to {MAX_PASSWORD} characters")
    return password


def hash_password(password: str) -> str:
    return _hasher.hash(check_password_rules(password))


def _verify(stored: str | None, password: str) -> bool:
    try:
        return _hasher.verify(stored or _NOBODY, password[:MAX_PASSWORD]) and stored is not None
    except (VerificationError, InvalidHashError):
        return False


async def verify_password(stored: str | None, password: str) -> bool:
    """Whether ``password`` matches the hash ``stored`` (None: no such user; checked all the same)."""
    return await anyio.to_thread.run_sync(_verify, stored, password)


@dataclass(slots=True)
class Session:
    token: str
    user: str | None  # None: not signed in (the login page's session, for its CSRF token)
    role: str | None
    csrf: str
    started: float
    seen: float
    by_proxy: bool = False  # named by the trusted proxy, not signed in with a password


@dataclass
class Sessions:
    """Sessions by token, in memory."""

    session_seconds: float
    idle_seconds: float
    clock: Callable[[], float] = time.monotonic
    _by_token: dict[str, Session] = field(default_factory=dict)

    def start(self, user: str | None, role: str | None, *, by_proxy: bool = False) -> Session:
        now = self.clock()
        if len(self._by_token) >= MAX_SESSIONS:
            self._expire(now)
            while len(self._by_token) >= MAX_SESSIONS:
                del self._by_token[next(iter(self._by_token))]
        session = Session(secrets.token_urlsafe(32), user, role, secrets.token_urlsafe(32), now, now, by_proxy)
        self._by_token[session.token] = session
        return session

    def get(self, token: str | None) -> Session | None:
        session = self._by_token.get(token) if token else None
        if session is None:
            return None
        now = self.clock()
        if now - session.started > self.session_seconds or now - session.seen > self.idle_seconds:
            del self._by_token[session.token]
            return None
        session.seen = now
        return session

    def end(self, token: str | None) -> None:
        if token:
            self._by_token.pop(token, None)

    def _expire(self, now: float) -> None:
        for token, s in list(self._by_token.items()):
            if now - s.started > self.session_seconds or now - s.seen > self.idle_seconds:
                del self._by_token[token]


def csrf_matches(session: Session | None, given: str | None) -> bool:
    return session is not None and given is not None and hmac.compare_digest(session.csrf.encode(), given.encode())


def same_origin(origin: str | None, referer: str | None, host: str | None) -> bool:
    """Whether the request came from a page of this console: its Origin (else Referer) names ``host``."""
    source = origin if origin and origin != "null" else referer
    if not source or not host:
        return False
    parts = urlsplit(source)
    return parts.scheme in ("http", "https") and parts.netloc.lower() == host.lower()


@dataclass
class LoginThrottle:
    """Recent failures per user name and per address."""

    clock: Callable[[], float] = time.monotonic
    _failures: dict[str, deque[float]] = field(default_factory=dict)

    def _count(self, key: str, now: float) -> int:
        times = self._failures.get(key)
        if not times:
            return 0
        while times and now - times[0] > THROTTLE_WINDOW_SECONDS:
            times.popleft()
        if not times:
            del self._failures[key]
        return len(times)

    def failures(self, user: str, address: str) -> int:
        now = self.clock()
        return max(self._count("u:" + user, now), self._count("a:" + address, now))

    def failed(self, user: str, address: str) -> None:
        now = self.clock()
        if len(self._failures) > 100_000:  # a flood of names: forget the stale ones
            for key in list(self._failures):
                self._count(key, now)
        for key in ("u:" + user, "a:" + address):
            self._failures.setdefault(key, deque(maxlen=REFUSE_AFTER * 2)).append(now)

    def succeeded(self, user: str) -> None:
        self._failures.pop("u:" + user, None)


def proxy_user(peer: str | None, header_value: str | None,
               networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]) -> str | None:
    """The user a trusted proxy names; None when the peer is not one of ``networks`` or names nobody."""
    if peer is None or not header_value or not networks:
        return None
    try:
        address = ipaddress.ip_address(peer)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if not any(address in n for n in networks):
        return None
    name = header_value.strip()
    return name if 0 < len(name) <= 64 and name.isprintable() and " " not in name else None


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"
