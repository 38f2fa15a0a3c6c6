"""The operator console: ``console`` (serve it until SIGTERM) and ``console-user add|remove|list``."""

from __future__ import annotations

import argparse
import getpass
import logging
import signal
import sys
from typing import Any

import anyio

from ..errors import ConfigurationError, NotFound
from ..settings.config import Settings
from ..store.console import ConsoleStore
from .database import run_with_store
from .input import UsageError
from .output import EXIT_OK, emit

log = logging.getLogger("outbox_mailer")
ADDRESS_SETTING = "OUTBOX_MAILER_CONSOLE__ADDRESS"
SOCKET_SETTING = "OUTBOX_MAILER_CONSOLE__SOCKET"


def cmd_console(args: argparse.Namespace, settings: Settings) -> int:
    cfg = settings.console
    settings.require_database_url()
    if cfg.address is None and cfg.socket is None:
        raise ConfigurationError(f"{ADDRESS_SETTING} (or {SOCKET_SETTING}) is not set: where should the console "
                                 "listen?", setting=ADDRESS_SETTING)
    # imported here for start-up time: starlette, jinja2, argon2 and uvicorn serve this command alone
    from ..console.app import build_app
    from ..console.auth import is_loopback
    from ..console.web import Console
    from ..serving.http_server import LOOPBACK, UNIX_PREFIX, serve_http
    from ..serving.systemd import SystemdNotifier
    from ..settings.checks import parse_listen_address

    async def go(store: ConsoleStore) -> int:
        await store.require_schema()
        host = parse_listen_address(cfg.address)[0] if cfg.address else "localhost"  # a Unix socket: local
        users = await store.users()
        if not users and not cfg.proxy_mode:
            if not is_loopback(host):
                raise ConfigurationError(
                    f"refusing to serve the console on {cfg.address}, which is not a loopback address, with no "
                    "user (add one: outbox-mailer console-user add NAME --role operator) and no trusted proxy "
                    "(OUTBOX_MAILER_CONSOLE__TRUSTED_PROXY_HEADER and __TRUSTED_PROXIES)", setting=ADDRESS_SETTING)
            log.warning("console: no user yet; add one with `outbox-mailer console-user add NAME --role operator`")
        if cfg.signing_key is None:
            log.warning("console: no OUTBOX_MAILER_CONSOLE__SIGNING_KEY: this process signs with a key of its own, so "
                        "its forms fail on another console process and after a restart")
        console = Console(settings, store)
        listen = cfg.address or UNIX_PREFIX + str(cfg.socket)
        setting = ADDRESS_SETTING if cfg.address else SOCKET_SETTING
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            proxies = LOOPBACK + cfg.proxy_networks() + cfg.forwarding_networks()
            async with serve_http(build_app(console), listen, setting=setting, exempt=proxies) as (bound_host, port):
                console.census.start()
                log.info("console listening on %s:%d (%d users%s)", bound_host, port, len(users),
                         f", trusted proxy header {cfg.trusted_proxy_header}" if cfg.proxy_mode else "")
                notifier = SystemdNotifier()
                notifier.notify("READY=1")
                async for signum in signals:
                    log.info("received %s: stopping", signal.Signals(signum).name)
                    notifier.notify("STOPPING=1")
                    break
                await console.census.stop()
        return EXIT_OK

    return run_with_store(settings, go, ConsoleStore)


def _read_password() -> str:
    if sys.stdin.isatty():
        first = getpass.getpass("password: ")
        if getpass.getpass("again: ") != first:
            raise UsageError("the two passwords differ")
        return first
    line = sys.stdin.readline(4096)
    return line[:-1] if line.endswith("\n") else line


def cmd_user_add(args: argparse.Namespace, settings: Settings) -> int:
    from ..console.auth import hash_password

    try:
        password_hash = hash_password(_read_password())
    except ValueError as exc:
        raise UsageError(f"console-user add: {exc} (read from standard input)") from None

    async def go(store: ConsoleStore) -> int:
        if not await store.add_user(args.name, args.role, password_hash):
            raise UsageError(f"console user {args.name!r} exists: remove it first to change its role or password")
        print(f"added console user {args.name} ({args.role})")
        return EXIT_OK

    return run_with_store(settings, go, ConsoleStore)


def cmd_user_remove(args: argparse.Namespace, settings: Settings) -> int:
    async def go(store: ConsoleStore) -> int:
        if not await store.remove_user(args.name):
            raise NotFound(args.name, f"no console user {args.name!r}")
        print(f"removed console user {args.name} (its sessions end at their next request)")
        return EXIT_OK

    return run_with_store(settings, go, ConsoleStore)


def cmd_user_list(args: argparse.Namespace, settings: Settings) -> int:
    async def go(store: ConsoleStore) -> int:
        for user in await store.users():
            if args.json:
                emit(user)
            else:
                print(f"{user['name']}  {user['role']}  since {user['created_at'].isoformat()}")
        return EXIT_OK

    return run_with_store(settings, go, ConsoleStore)


def _user_name(text: str) -> str:
    if not 1 <= len(text) <= 64 or not text.isprintable() or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError("1 to 64 printable characters, no spaces")
    return text


def register(sub: Any) -> None:
    """Add console and console-user."""
    p = sub.add_parser("console", help="serve the operator console over HTTP until SIGTERM")
    p.set_defaults(func=cmd_console)

    p = sub.add_parser("console-user", help="the console's users: add, remove, list")
    users = p.add_subparsers(dest="user_command", required=True, metavar="ACTION")
    q = users.add_parser("add", help="add a user; the password is read from standard input")
    q.add_argument("name", type=_user_name)
    q.add_argument("--role", choices=("viewer", "operator"), required=True)
    q.set_defaults(func=cmd_user_add)
    q = users.add_parser("remove", help="remove a user")
    q.add_argument("name", type=_user_name)
    q.set_defaults(func=cmd_user_remove)
    q = users.add_parser("list", help="every user and role")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_user_list)
