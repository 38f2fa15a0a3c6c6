"""Setting up and trying out: grant (database roles), check (configuration and reachability), demo, sink."""

from __future__ import annotations

import argparse
from typing import Any

import anyio

from ..errors import DatabaseError, TransportUnavailable
from ..message.staging import StagingGuard
from ..settings.checks import fallback_setting, parse_listen_address, unsigned_unsubscribe
from ..settings.config import Settings
from ..settings.transports import SmtpSettings
from ..store import Store
from ..store.grants import grant_statements
from ..store.migrations import expected_schema_version
from .database import run_with_store, with_store
from .input import UsageError
from .output import EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, check_line, emit

SINK_ADDRESS = "127.0.0.1:2525"


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
        report("unsubscribe", True, unsubscribe_summary(settings))
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
                    hint = local_relay_hint(name, settings)
                    report(name, False, str(exc) + (f"; {hint}" if hint else ""))
                    code = EXIT_UNREACHABLE
        finally:
            for transport in transports.values():
                await transport.aclose()
        return code

    return anyio.run(go)


def unsubscribe_summary(settings: Settings) -> str:
    """One-click unsubscribe as `check` reports it, with the warning when SMTP mail goes unsigned."""
    config = settings.unsubscribe
    if config.base_url is None:
        return "off: rows naming an unsubscribe_category fail (set OUTBOX_MAILER_UNSUBSCRIBE__BASE_URL and __KEYS)"
    smtp = [name for name, t in settings.all_transports().items() if isinstance(t, SmtpSettings)]
    warning = unsigned_unsubscribe(smtp, settings.dkim.enabled)
    return (f"links under {config.base_url}/unsubscribe/, valid {config.validity_days} days"
            + (f"; WARNING: {warning}" if warning else ""))


def local_relay_hint(name: str, settings: Settings) -> str | None:
    """For an SMTP transport on this machine whose check failed: the settings a local relay or sink needs.

    The defaults (tls=starttls, port 587) suit a relay elsewhere, and stay: a loopback address may
    also be a tunnel to one. None when the transport is not SMTP on a loopback address, or already
    has tls=none and a port.
    """
    from ..console.auth import is_loopback  # the one loopback test; imported only when a check failed

    config = settings.smtp if name == "smtp" else settings.transports.get(name)
    if not isinstance(config, SmtpSettings) or not is_loopback(config.host):
        return None
    prefix = fallback_setting(name).removesuffix("FALLBACK")  # OUTBOX_MAILER_SMTP__ or ..._TRANSPORTS__<NAME>__
    sink = f"(outbox-mailer sink listens on {SINK_ADDRESS.rpartition(':')[2]})"
    if config.tls != "none":
        port = config.port if config.port is not None else "<its port>"
        return (f"{config.host} is this machine: a local relay or sink without TLS needs {prefix}TLS=none and "
                f"{prefix}PORT={port} {sink}; tls={config.tls} requires TLS, here on port {config.effective_port}")
    if config.port is None:
        return (f"{config.host} is this machine: with tls=none the port defaults to {config.effective_port}; "
                f"a local relay or sink elsewhere needs {prefix}PORT=<its port> {sink}")
    return None


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    # Imported here for start-up time only (no cycle): the demo's cluster and sink (~60 ms)
    # serve `demo` alone.
    from ..devtools.demo import run_demo

    return anyio.run(run_demo)


def cmd_sink(args: argparse.Namespace, settings: Settings) -> int:
    # Imported here for start-up time only (no cycle), as for the demo.
    from ..devtools.sink_command import EmlFolder, serve_sink

    try:
        host, port = parse_listen_address(args.address)
    except ValueError as exc:
        raise UsageError(f"--address {exc}") from None
    folder = None
    if args.eml_dir is not None:
        try:
            folder = EmlFolder.open(args.eml_dir)
        except OSError as exc:
            raise UsageError(f"--eml-dir {args.eml_dir!r}: cannot write there: {exc.strerror or exc}") from None
    try:
        anyio.run(serve_sink, host, port, folder)
    except OSError as exc:  # the address is taken, or not one of this machine's
        raise UsageError(f"--address {args.address!r}: cannot listen there: {exc.strerror or exc}") from None
    return EXIT_OK


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

    p = sub.add_parser("sink", help="a local SMTP server that accepts every message and prints one line for each "
                                    "(no TLS, no AUTH: for a daemon on this machine); runs until SIGINT/SIGTERM")
    p.add_argument("--address", default=SINK_ADDRESS, metavar="HOST:PORT",
                   help=f"where to listen (default {SINK_ADDRESS})")
    p.add_argument("--eml-dir", metavar="DIR", help="also write each message there as an .eml file")
    p.set_defaults(func=cmd_sink)
