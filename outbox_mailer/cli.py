"""The outbox-mailer command: the daemon and its operator commands.

Exit codes: 0 ok · 1 not found / nothing done · 2 usage, configuration or bad
input · 3 a dependency (database, mail server) is unreachable. ``--json``
prints one JSON object per line. Every command except ``demo`` loads and
validates the settings first (exit 2 naming the setting); arguments and the
``enqueue --stdin`` object are parsed strictly by :mod:`outbox_mailer.cli_input`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

import anyio

from . import __version__, operations
from .cli_input import UsageError, dedupe_key, int_in, parse_time, read_email, stdin_limit
from .config import Settings, load_settings
from .errors import (
    ConfigurationError,
    DatabaseError,
    DatabaseUnavailable,
    InvalidTransition,
    NotFound,
    OutboxMailerError,
    SchemaMismatch,
    TransportUnavailable,
)
from .logs import LOG_FORMATS, configure_logging
from .migrations import expected_schema_version, load_migrations
from .store import Store

EXIT_OK, EXIT_NOTHING, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
DESCRIPTION = "outbox-mailer: the transactional-email outbox daemon and its operator commands."
EPILOG = ("exit codes: 0 ok, 1 not found or nothing done, 2 usage or configuration error, "
          "3 a dependency (database, mail server) is unreachable")
STATUS_FIELDS = ("dedupe_key", "status", "attempts", "max_attempts", "transport", "scheduled_at", "sent_at",
                 "provider_message_id", "last_error", "created_at", "updated_at")


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"cannot serialise {type(value).__name__}")


def emit(obj: dict[str, Any]) -> None:
    print(json.dumps(obj, default=_json_default, ensure_ascii=False), flush=True)


async def with_store(settings: Settings, action: Callable[[Store], Awaitable[int]]) -> int:
    store = await Store.open(settings.require_database_url())
    try:
        return await action(store)
    finally:
        await store.close()


# ---- commands ---------------------------------------------------------------------


def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    migrations = load_migrations()
    if args.print_sql:
        for m in migrations:
            print(f"-- {m.name} (version {m.version}, sha256 {m.checksum})\n{m.sql.rstrip()}\n")
        return EXIT_OK

    async def go(store: Store) -> int:
        applied = await store.migrate(migrations)
        for m in applied:
            print(f"applied {m.name}")
        print(f"schema at version {migrations[-1].version}" + ("" if applied else " (nothing to do)"))
        return EXIT_OK

    return anyio.run(with_store, settings, go)


def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    from .daemon import Daemon
    from .systemd import SystemdNotifier
    from .transports import build_transports

    settings.require_database_url()
    if args.processes < 1:
        raise UsageError("--processes must be at least 1")
    if args.processes > 1:
        from .supervisor import supervise

        return supervise(args.processes, ["--log-level", args.log_level, "--log-format", args.log_format],
                         metrics_address=settings.metrics_address, worker_name=settings.worker_name)

    async def go() -> int:
        transports = build_transports(settings)
        try:
            metrics = None
            if settings.metrics_address:
                from .metrics import Metrics

                metrics = Metrics(settings)
            daemon = Daemon(settings, transports, default_transport=settings.default_transport,
                            notifier=SystemdNotifier(), observer=metrics)
            # the metrics server binds before the daemon starts (a taken port: exit 2) and stops with it
            async with metrics.serve(daemon) if metrics else contextlib.nullcontext():
                await daemon.run(handle_signals=True)
        finally:
            with anyio.CancelScope(shield=True):
                for transport in transports.values():
                    await transport.aclose()
        return EXIT_OK

    return anyio.run(go)


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    async def go(store: Store) -> int:
        rows = {r["dedupe_key"]: r for r in await store.status(args.keys)}
        missing = [k for k in args.keys if k not in rows]
        for key in args.keys:
            if key in rows:
                _print_status(rows[key], args.json)
        for key in missing:
            print(f"outbox-mailer: no email with dedupe key {key!r}", file=sys.stderr)
        return EXIT_NOTHING if missing else EXIT_OK

    return anyio.run(with_store, settings, go)


def _print_status(row: dict[str, Any], as_json: bool) -> None:
    data = {k: row[k] for k in STATUS_FIELDS}
    if as_json:
        emit(data)
        return
    when = row["sent_at"] or row["scheduled_at"]
    label = "sent at" if row["sent_at"] else "scheduled"
    line = f"{row['dedupe_key']}  {row['status']}  attempts={row['attempts']}  {label} {when.isoformat()}"
    if row["last_error"]:
        line += f"  last_error={row['last_error']}"
    print(line)


def cmd_enqueue(args: argparse.Namespace, settings: Settings) -> int:
    email = _email_from_stdin(settings) if args.stdin else _email_from_flags(args)
    email.setdefault("dedupe_key", str(uuid.uuid4()))

    async def go(store: Store) -> int:
        try:
            new_id = await store.enqueue(email)
        except DatabaseError as exc:
            if isinstance(exc, DatabaseUnavailable | SchemaMismatch):
                raise
            raise UsageError(f"the database refused the email: {exc.__cause__ or exc}") from exc
        result = {"dedupe_key": email["dedupe_key"], "created": new_id is not None, "id": new_id}
        if args.json:
            emit(result)
        elif new_id is None:
            print(f"already enqueued: {email['dedupe_key']} (nothing inserted)")
        else:
            print(f"enqueued {email['dedupe_key']} (id {new_id})")
        return EXIT_OK

    return anyio.run(with_store, settings, go)


def _email_from_stdin(settings: Settings) -> dict[str, Any]:
    limit = stdin_limit(settings.max_message_bytes)
    return read_email(sys.stdin.buffer.read(limit + 1), limit)


def _email_from_flags(args: argparse.Namespace) -> dict[str, Any]:
    if not args.to or args.subject is None:
        raise UsageError("enqueue needs --to and --subject (or --stdin with a JSON object)")
    if args.text is None and args.html is None:
        raise UsageError("enqueue needs --text or --html")
    headers = {}
    for item in args.header or []:
        name, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--header {item!r}: expected NAME=VALUE")
        headers[name] = value
    email: dict[str, Any] = {
        "from_address": args.from_address, "to_addresses": args.to, "cc_addresses": args.cc or [],
        "bcc_addresses": args.bcc or [], "reply_to": args.reply_to, "subject": args.subject,
        "text_body": args.text, "html_body": args.html, "headers": headers, "transport": args.transport,
        "priority": args.priority,
        "scheduled_at": parse_time("--scheduled-at", args.scheduled_at) if args.scheduled_at else None,
    }
    if args.key is not None:  # an empty --key is refused by its type, never replaced by a random one
        email["dedupe_key"] = args.key
    return email


def cmd_cancel(args: argparse.Namespace, settings: Settings) -> int:
    async def go(store: Store) -> int:
        await store.cancel(args.key)
        print(f"cancelled {args.key}")
        return EXIT_OK

    return anyio.run(with_store, settings, go)


def cmd_resolve(args: argparse.Namespace, settings: Settings) -> int:
    status = "sent" if args.sent else "failed"

    async def go(store: Store) -> int:
        await store.resolve(args.key, status)
        print(f"resolved {args.key} as {status}")
        return EXIT_OK

    return anyio.run(with_store, settings, go)


def cmd_check(args: argparse.Namespace, settings: Settings) -> int:
    from .transports import build_transports

    def report(check: str, ok: bool, detail: Any) -> None:
        if args.json:
            emit({"check": check, "ok": ok, "detail": detail})
        else:
            text = json.dumps(detail, indent=2) if isinstance(detail, dict) else detail
            print(f"[{'ok' if ok else 'FAIL'}] {check}: {text}")

    async def go() -> int:
        report("configuration", True, settings.redacted())
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
    from .demo import run_demo

    return anyio.run(run_demo)


# ---- parser and main --------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="outbox-mailer", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--log-format", default="text", choices=list(LOG_FORMATS),
                        help="text (with <N> priority prefixes under journald) or one JSON object per line")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("migrate", help="create or upgrade the schema (idempotent)")
    p.add_argument("--print-sql", action="store_true", help="print every migration's SQL instead of running it")
    p.set_defaults(func=cmd_migrate)

    p = sub.add_parser("run", help="run the daemon until SIGTERM/SIGINT")
    p.add_argument("--processes", type=int, default=1, metavar="N",
                   help="run N daemon processes under one parent (one Python process uses one core)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("status", help="status of emails by dedupe key")
    p.add_argument("keys", nargs="+", metavar="KEY", type=dedupe_key)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("enqueue", help="insert one email (flags, or --stdin with one JSON object)")
    p.add_argument("--stdin", action="store_true", help="read one JSON object with the table's column names")
    p.add_argument("--key", type=dedupe_key, help="dedupe key, 1-255 characters (default: a random UUID)")
    p.add_argument("--from", dest="from_address")
    p.add_argument("--to", action="append")
    p.add_argument("--cc", action="append")
    p.add_argument("--bcc", action="append")
    p.add_argument("--reply-to")
    p.add_argument("--subject")
    p.add_argument("--text")
    p.add_argument("--html")
    p.add_argument("--header", action="append", metavar="NAME=VALUE")
    p.add_argument("--transport")
    p.add_argument("--priority", type=int_in(-32_768, 32_767), default=0, help="higher first (default 0)")
    p.add_argument("--scheduled-at", metavar="ISO8601")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_enqueue)

    p = sub.add_parser("cancel", help="cancel a pending email")
    p.add_argument("key", metavar="KEY", type=dedupe_key)
    p.set_defaults(func=cmd_cancel)

    p = sub.add_parser("resolve", help="settle an in_doubt email after checking what the recipient got")
    p.add_argument("key", metavar="KEY", type=dedupe_key)
    outcome = p.add_mutually_exclusive_group(required=True)
    outcome.add_argument("--sent", action="store_true", help="it was delivered: mark it sent")
    outcome.add_argument("--failed", action="store_true", help="it was not delivered and must not be: mark it failed")
    p.set_defaults(func=cmd_resolve)

    operations.register(sub)

    p = sub.add_parser("check", help="check configuration, database and mail server; sends nothing")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_check)

    sub.add_parser("demo", help="self-contained demo: throwaway PostgreSQL and SMTP sink").set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    try:
        settings = load_settings() if args.command != "demo" else Settings()
        return args.func(args, settings)
    except (ConfigurationError, UsageError, SchemaMismatch) as exc:
        return _fail(exc, EXIT_USAGE)
    except (NotFound, InvalidTransition) as exc:
        return _fail(exc, EXIT_NOTHING)
    except (DatabaseUnavailable, TransportUnavailable) as exc:
        return _fail(exc, EXIT_UNREACHABLE)
    except OutboxMailerError as exc:
        return _fail(exc, EXIT_NOTHING)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `outbox-mailer ... | head`: the reader left; not an error of ours
        sys.stderr.close()
        return EXIT_OK


def _fail(exc: Exception, code: int) -> int:
    print(f"outbox-mailer: {exc}", file=sys.stderr)
    return code
