"""Setting up and trying out: grant (database roles), check (configuration and reachability), demo."""

from __future__ import annotations

import argparse
from typing import Any

import anyio

from ..errors import DatabaseError, TransportUnavailable
from ..message.staging import StagingGuard
from ..settings.config import Settings
from ..store import Store
from ..store.grants import grant_statements
from ..store.migrations import expected_schema_version
from .database import run_with_store, with_store
from .output import EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, check_line, emit


def cmd_grant(args: argparse.Namespace, settings: Settings) -> int:
    statements = grant_statements(args.app_role, args.daemon_role, args.console_role)
    if args.print_sql:
        print(";\n".join(statements) + ";")
        return EXIT_OK

    async def go(store: Store) -> int:
        await store.run_script(statements)
        print(f"granted: {args.app_role} may insert and read emails; {args.daemon_role} may run the daemon"
              + (f"; {args.console_role} may run the operator console" if args.console_role else ""))
        return EXIT_OK

    return run_with_store(settings, go)


def cmd_check(args: argparse.Namespace, settings: Settings) -> int:
    # Imported here for start-up time only (no cycle): the transports' client libraries
    # (httpx, aiosmtplib: ~130 ms) serve `check` and `run` alone.
    from ..daemon.transport_factory import build_transports

    def report(check: str, ok: bool, detail: Any) -> None:
        if args.json:
            emit({"check": check, "ok": ok, "detail": detail})
        else:
            print(check_line(check, ok, detail))

    async def go() -> int:
        report("configuration", True, settings.redacted())
        guard = StagingGuard.of(settings.allowed_recipients, settings.redirect_to)
        report("staging guard", True, guard.describe() if guard is not None else "off: every recipient gets mail")
        report("dkim", True, settings.dkim.describe())  # domain, selector, key size: never the key
        report("addresses", True, "special-use domains (.local, .test, .home.arpa ...) "
               + ("allowed, .invalid refused" if settings.allow_special_use_domains else
                  "refused (OUTBOX_MAILER_ALLOW_SPECIAL_USE_DOMAINS=true allows them)")
               + "; internationalised (non-ASCII) local parts need a server offering SMTPUTF8")
        code = EXIT_OK
        try:
            version = await with_store(settings, lambda s: s.schema_version())
            expected = expected_schema_version()
            ok = version == expected
            report("database", ok, f"reachable; schema version {version or 'none'}, expected {expected}"
                   + ("" if ok else ": run `outbox-mailer migrate`"))
            code = code if ok else EXIT_USAGE
        except DatabaseError as exc:
            report("database", False, str(exc))
            code = EXIT_UNREACHABLE
        transports = build_transports(settings)
        try:
            for name, transport in transports.items():
                try:
                    report(name, True, await transport.check())
                except TransportUnavailable as exc:
                    report(name, False, str(exc))
                    code = EXIT_UNREACHABLE
        finally:
            for transport in transports.values():
                await transport.aclose()
        return code

    return anyio.run(go)


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    # Imported here for start-up time only (no cycle): the demo's cluster and sink (~60 ms)
    # serve `demo` alone.
    from ..devtools.demo import run_demo

    return anyio.run(run_demo)


def register(sub: Any) -> None:
    """Add grant, check and demo to the main parser's subparsers."""
    p = sub.add_parser("grant", help="least-privilege grants for an application role and a daemon role")
    p.add_argument("--app-role", required=True)
    p.add_argument("--daemon-role", required=True)
    p.add_argument("--console-role", help="also the operator console's role (created, LOGIN, when missing)")
    p.add_argument("--print-sql", action="store_true", help="print the statements instead of running them")
    p.set_defaults(func=cmd_grant)

    p = sub.add_parser("check", help="check configuration, database and mail server; sends nothing")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_check)

    sub.add_parser("demo", help="self-contained demo: throwaway PostgreSQL and SMTP sink").set_defaults(func=cmd_demo)
