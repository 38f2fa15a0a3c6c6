"""Who is asking: passwords (Argon2id), signed tokens, sessions, CSRF, the origin check, the trusted proxy.

* **Passwords** are Argon2id hashes (argon2-cffi's defaults: 64 MiB, 3 passes, 4 lanes), checked off
  the event loop and only through the sign-in gate (``throttle.py``), which bounds how many run at
  once. A name with no user is checked against a hash of nothing, so a wrong name and a wrong
  password take the same time and get the same answer.
* **Signing key**: ``OUTBOX_MAILER_CONSOLE__SIGNING_KEY`` (a credential; several keys separated by
  white space: the first signs, each verifies, which is how a key is rotated) signs the sign-in
  form's token and derives each session's CSRF token, so every console process that shares the key
  accepts the others' forms.
* **Sessions** are rows of ``email_console_sessions`` (the store's): a random token in an
  ``HttpOnly; SameSite=Strict`` cookie, its SHA-256 in the row. They survive a restart and are shared
  by every console process; a session ends by ``POST /logout``, ``session_seconds`` after sign-in,
  ``idle_seconds`` without a request (the live refresh does not count), and at the next request once
  the user is removed or given another role. Signing in replaces the session (no fixation).
* **CSRF**: a signed-in session's token is ``HMAC(key, "csrf:" + token hash)``; the sign-in form's is
  a signed, expiring token bound to a random value in a cookie of its own (nothing is stored: the
  anonymous cannot fill any table). Each is compared in constant time, and the request's ``Origin``
  (or, without one, ``Referer``) must name this console: an allowed host, and the request's scheme.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

ROLES = ("viewer", "operator")
MIN_PASSWORD, MAX_PASSWORD = 12, 1024  # characters
FORM_SECONDS = 3600  # a sign-in form's token is good this long
MIN_KEY = 32  # characters of a signing key

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
        _hasher.verify(stored or _NOBODY, password[:MAX_PASSWORD])  # raises unless the password matches
    except (VerificationError, InvalidHashError):
        return False
    return stored is not None


async def verify_password(stored: str | None, password: str) -> bool:
    """Whether ``password`` matches the hash ``stored`` (None: no such user; checked all the same).
    Holds 64 MiB while it runs: call it through :class:`~.throttle.SignInGate` only."""
    return await anyio.to_thread.run_sync(_verify, stored, password)


class Signer:
    """HMAC-SHA256 with the first key; verified with any of them (a key being rotated out)."""

    def __init__(self, keys: Sequence[bytes]) -> None:
        if not keys:
            raise ValueError("no signing key")
        self._keys = tuple(keys)

    @classmethod
    def from_setting(cls, text: str | None) -> Signer:
        """The keys of OUTBOX_MAILER_CONSOLE__SIGNING_KEY (white-space separated); None: one random key,
        this process's own."""
        return cls([k.encode() for k in text.split()] if text else [secrets.token_bytes(32)])

    def sign(self, text: str) -> str:
        return _mac(self._keys[0], text)

    def valid(self, text: str, mac: str) -> bool:
        return any(hmac.compare_digest(_mac(key, text).encode(), mac.encode()) for key in self._keys)

    def form_token(self, nonce: str, now: float) -> str:
        """The sign-in form's CSRF token, bound to the ``nonce`` of its cookie, good for FORM_SECONDS."""
        expires = int(now) + FORM_SECONDS
        return f"{expires}.{self.sign(f'login:{nonce}:{expires}')}"

    def form_token_valid(self, nonce: str | None, token: str | None, now: float) -> bool:
        if not nonce or not token or "." not in token:
            return False
        expires, mac = token.split(".", 1)
        return expires.isdigit() and now <= int(expires) and self.valid(f"login:{nonce}:{expires}", mac)


def _mac(key: bytes, text: str) -> str:
    digest = hmac.new(key, text.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def token_hash(token: str) -> bytes:
    """What ``email_console_sessions`` keeps of a session's token."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


@dataclass(frozen=True, slots=True)
class Session:
    """Who a request is from: a signed-in user (``token_hash``: its row) or one a trusted proxy named."""

    user: str
    role: str
    csrf: str
    token_hash: bytes | None = None  # None: named by the trusted proxy, which every request names again


def session_csrf(signer: Signer, hashed: bytes) -> str:
    return signer.sign("csrf:" + hashed.hex())


def proxy_csrf(signer: Signer, user: str) -> str:
    return signer.sign("proxy:" + user)


def csrf_matches(session: Session | None, given: str | None) -> bool:
    return session is not None and given is not None and hmac.compare_digest(session.csrf.encode(), given.encode())


def same_origin(origin: str | None, referer: str | None, host: str, scheme: str) -> bool:
    """Whether the request came from a page of this console: its Origin (else Referer) is
    ``scheme://host`` (``host``: the request's Host, already found allowed)."""
    source = origin if origin and origin != "null" else referer
    if not source:
        return False
    parts = urlsplit(source)
    return parts.scheme == scheme and parts.netloc.lower() == host.lower()


def proxy_user(header_value: str | None) -> str | None:
    """The user a trusted proxy's header names (None: nobody, or not a user name)."""
    if not header_value:
        return None
    name = header_value.strip()
    return name if 0 < len(name) <= 64 and name.isprintable() and " " not in name else None


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"
