"""The operator console served on loopback by uvicorn (as `outbox-mailer console` serves it) against the
test's PostgreSQL, with an operator and a viewer, and an HTTP client that signs in like a browser."""

from __future__ import annotations

import contextlib
import html
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import httpx

from outbox_mailer.console.app import build_app
from outbox_mailer.console.auth import hash_password
from outbox_mailer.console.web import Console
from outbox_mailer.serving.http_server import serve_http
from outbox_mailer.settings.config import Settings
from outbox_mailer.store.console import ConsoleStore
from tests.smtp_server import free_port

PASSWORD = "correct horse battery"  # every test user's
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@cache
def password_hash() -> str:
    return hash_password(PASSWORD)  # once per session: Argon2id takes ~0.1 s


@dataclass
class Served:
    base: str
    store: ConsoleStore
    console: Console

    def client(self, **headers: str) -> Client:
        return Client(httpx.AsyncClient(base_url=self.base, follow_redirects=False, timeout=10, headers=headers),
                      self.base)


class Client:
    """A browser's part: cookies, the page's CSRF token, an Origin header on each POST."""

    def __init__(self, http: httpx.AsyncClient, base: str) -> None:
        self.http, self.base, self.csrf = http, base, ""

    async def get(self, path: str, **kw: Any) -> httpx.Response:
        response = await self.http.get(path, **kw)
        found = _CSRF.search(response.text)
        if found:
            self.csrf = html.unescape(found.group(1))
        return response

    async def post(self, path: str, data: dict[str, str] | None = None, *, origin: str | None = "same",
                   csrf: bool = True) -> httpx.Response:
        fields = dict(data or {})
        if csrf:
            fields.setdefault("csrf_token", self.csrf)
        headers = {} if origin is None else {"Origin": self.base if origin == "same" else origin}
        return await self.http.post(path, data=fields, headers=headers)

    async def login(self, user: str, password: str = PASSWORD) -> httpx.Response:
        await self.get("/login")
        response = await self.post("/login", {"username": user, "password": password})
        if response.status_code == 303:
            await self.get("/")  # the signed-in session's CSRF token
        return response

    async def aclose(self) -> None:
        await self.http.aclose()


@contextlib.asynccontextmanager
async def served_console(db_url: str, *, users: tuple[tuple[str, str], ...] = (("olga", "operator"),
                                                                             ("victor", "viewer")),
                         console: dict[str, Any] | None = None, **settings: Any) -> AsyncIterator[Served]:
    """``console``: console settings beside the address (a census on every request unless given; with
    ``socket``, on that Unix socket instead); ``settings``: the others."""
    cfg = {"census_seconds": 0, **(console or {})}
    if "socket" not in cfg:
        cfg["address"] = f"127.0.0.1:{free_port()}"
    address = cfg.get("address") or "unix:" + cfg["socket"]
    values: dict[str, Any] = {"database_url": db_url, "default_from": "App <app@example.com>", "console": cfg}
    values.update(settings)
    store = await ConsoleStore.open(db_url)
    try:
        for name, role in users:
            await store.add_user(name, role, password_hash())
        app = Console(Settings(**values), store, slow_seconds=0.05)
        async with serve_http(build_app(app), address, setting="console") as (host, port):
            yield Served(f"http://{host}:{port}" if port else "http://localhost", store, app)
    finally:
        await store.close()

