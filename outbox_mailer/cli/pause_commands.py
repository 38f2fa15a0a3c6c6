"""Transport pauses: ``pause TRANSPORT [--for DURATION] [--reason TEXT]`` and ``resume TRANSPORT``.

Both name a configured transport (another name: exit 2, naming the configured ones), act through the
schema's functions (sql/0024_transport_pauses.sql) and are recorded in email_operator_actions with the
actor ``cli:<OS user>``. Every daemon on the database reads them within about a second
(daemon/pauses.py). ``resume`` lifts the operator's pause and the circuit breakers' (exit 1 when the
transport was not paused).
"""

from __future__ import annotations

import argparse
import getpass
import os
from datetime import timedelta
from typing import Any

from ..clock import utc_now
from ..errors import NotFound
from ..settings.config import Settings
from ..store import Store
from .database import run_with_store
from .input import UsageError, duration
from .output import EXIT_OK, emit

MAX_REASON = 1000  # characters (the table's check)


def cli_actor() -> str:
    """Who acts from the command line: ``cli:`` and the OS user (its uid when it has no name)."""
    try:
        return f"cli:{getpass.getuser()}"
    except (OSError, KeyError):
        return f"cli:{os.getuid()}"


def configured(settings: Settings, name: str) -> str:
    names = sorted(settings.all_transports())
    if name not in names:
        raise UsageError(f"no transport named {name!r}; the configured ones: {', '.join(names)}")
    return name


def cmd_pause(args: argparse.Namespace, settings: Settings) -> int:
    transport = configured(settings, args.transport)
    if args.seconds is not None and args.seconds <= 0:
        raise UsageError("--for: a duration longer than zero, like 90s, 15m, 1h (without it: until resumed)")
    if len(args.reason) > MAX_REASON:
        raise UsageError(f"--reason: at most {MAX_REASON} characters")
    until = utc_now() + timedelta(seconds=args.seconds) if args.seconds is not None else None

    async def go(store: Store) -> int:
        await store.require_schema()
        row = await store.pause_transport(transport, cli_actor(), args.reason, until)
        if args.json:
            emit(row)
        else:
            end = f"until {row['paused_until'].isoformat()}" if row["paused_until"] else "until resumed"
            print(f"paused {transport} {end}" + (f": {row['reason']}" if row["reason"] else ""))
        return EXIT_OK

    return run_with_store(settings, go)


def cmd_resume(args: argparse.Namespace, settings: Settings) -> int:
    transport = configured(settings, args.transport)

    async def go(store: Store) -> int:
        await store.require_schema()
        lifted = await store.resume_transport(transport, cli_actor())
        if not lifted:
            raise NotFound(transport, f"transport {transport} is not paused")
        print(f"resumed {transport} (lifted the pause of: {', '.join(lifted)})")
        return EXIT_OK

    return run_with_store(settings, go)


def register(sub: Any) -> None:
    """Add pause and resume."""
    p = sub.add_parser("pause", help="stop every daemon sending through a transport (rows wait, or fail over)")
    p.add_argument("transport", metavar="TRANSPORT")
    p.add_argument("--for", dest="seconds", type=duration, metavar="DURATION",
                   help="lift it after 90s, 15m, 1h, 7d... (default: until resume)")
    p.add_argument("--reason", default="", help="why, shown in the console and the log")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_pause)

    p = sub.add_parser("resume", help="lift a transport's pause (the operator's and the circuit breakers')")
    p.add_argument("transport", metavar="TRANSPORT")
    p.set_defaults(func=cmd_resume)


__all__ = ["cli_actor", "register"]
