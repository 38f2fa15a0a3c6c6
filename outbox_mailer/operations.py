"""Operator commands: list, bulk retry, stats --watch, prune, grant.

Registered on the main parser by :func:`register`; shares the output and
exit-code conventions of :mod:`outbox_mailer.cli` (``--json`` prints one
object per line).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

import anyio

from .cli_input import UsageError, dedupe_key, duration, int_in, seconds_in
from .config import Settings
from .errors import NotFound
from .grants import grant_statements
from .retention import prune
from .store import Store

EXIT_OK, EXIT_NOTHING, EXIT_USAGE = 0, 1, 2
STATUSES = ("pending", "sending", "sent", "failed", "cancelled", "in_doubt")
RETRYABLE = ("failed", "cancelled", "in_doubt")
MAX_LIST_LIMIT = 100_000
MAX_ATTEMPTS = 1000  # like OUTBOX_MAILER_MAX_ATTEMPTS
RETRY_HELP = """\
Put failed, cancelled or in_doubt emails back to pending, due now.

How many new tries: retry KEY gives the email as many new tries as its own
max_attempts column says (the configured OUTBOX_MAILER_MAX_ATTEMPTS when that
column is null), so an email enqueued with max_attempts = 1 gets one more try,
not eight; a bulk retry (--status ... --since ...) does the same for each email.
--attempts N overrides both. The row's max_attempts becomes attempts made so
far + the new tries (so a second retry of that email gives it two).
"""


def _run(settings: Settings, action: Callable[[Store], Any]) -> int:
    from .cli import with_store

    return anyio.run(with_store, settings, action)


def _emit(obj: dict[str, Any]) -> None:
    from .cli import emit

    emit(obj)


# ---- list ------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace, settings: Settings) -> int:
    async def go(store: Store) -> int:
        rows = await store.list_by_status(args.status, args.since, args.limit)
        if args.json:
            for row in rows:
                _emit(row)
        else:
            _print_table(rows)
        return EXIT_OK if rows else EXIT_NOTHING

    return _run(settings, go)


def _print_table(rows: list[dict[str, Any]]) -> None:
    if not rows:
        print("no emails match", file=sys.stderr)
        return
    print(f"{'dedupe_key':32} {'status':9} {'att':>3}  {'updated_at':25} last_error")
    for r in rows:
        error = (r["last_error"] or "").replace("\n", " ")
        print(f"{r['dedupe_key'][:32]:32} {r['status']:9} {r['attempts']:>3}  "
              f"{r['updated_at'].isoformat(timespec='seconds'):25} {error[:80]}")


# ---- retry (one key, or in bulk) ----------------------------------------------------


def cmd_retry(args: argparse.Namespace, settings: Settings) -> int:
    if (args.key is None) == (args.status is None):
        raise UsageError("retry takes a KEY, or --status STATUS --since DURATION for many")
    if args.key is not None:
        async def one(store: Store) -> int:
            tries = args.attempts
            if tries is None:  # the row's own limit, else the configured default
                rows = await store.status([args.key])
                if not rows:
                    raise NotFound(args.key)
                tries = rows[0]["max_attempts"] or settings.max_attempts
            await store.retry(args.key, tries)
            print(f"requeued {args.key} ({tries} new {'try' if tries == 1 else 'tries'})")
            return EXIT_OK

        return _run(settings, one)
    if args.since is None:
        raise UsageError("a bulk retry needs --since (for example --since 1h)")

    async def bulk(store: Store) -> int:
        count = await store.count_retryable(args.status, args.since)
        if count == 0:
            print(f"no {args.status} emails changed in that window", file=sys.stderr)
            return EXIT_NOTHING
        if not args.yes and not _confirm(f"requeue {count} {args.status} emails?"):
            print("nothing requeued", file=sys.stderr)
            return EXIT_NOTHING
        done = await store.retry_bulk(args.status, args.since, args.attempts, settings.max_attempts)
        if args.json:
            _emit({"status": args.status, "requeued": done})
        else:
            print(f"requeued {done} emails")
        return EXIT_OK

    return _run(settings, bulk)


def _confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        raise UsageError(f"{question} (no terminal to ask on: add --yes)")
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


# ---- stats (--watch) -----------------------------------------------------------------


def _format_stats(stats: dict[str, Any]) -> list[str]:
    def show(value: Any) -> str:
        return "-" if value is None else f"{value:.1f}" if isinstance(value, float) else str(value)

    return [f"{name:24} {show(value)}" for name, value in stats.items()]


def cmd_stats(args: argparse.Namespace, settings: Settings) -> int:
    async def go(store: Store) -> int:
        while True:
            stats = await store.stats()
            if args.json:
                _emit(stats)
            elif args.watch and sys.stdout.isatty():
                print("\x1b[H\x1b[2J" + time.strftime("%H:%M:%S  ") + "outbox-mailer stats (Ctrl-C to quit)")
                print("\n".join(_format_stats(stats)), flush=True)
            else:
                print("\n".join(_format_stats(stats)), flush=True)
            if not args.watch:
                return EXIT_OK
            await anyio.sleep(args.interval)

    try:
        return _run(settings, go)
    except KeyboardInterrupt:
        return EXIT_OK


# ---- prune and grant --------------------------------------------------------------------


def cmd_prune(args: argparse.Namespace, settings: Settings) -> int:
    show = sys.stderr.isatty() and not args.json

    def progress(phase: str, done: int, total: int) -> None:
        if show:
            print(f"\r{phase} {done}/{total}", end="", file=sys.stderr, flush=True)

    async def go(store: Store) -> int:
        if args.dry_run:
            to_scrub, to_delete = await store.count_prunable(settings.prune.scrub_after_days * 86_400,
                                                             settings.prune.delete_after_days * 86_400)
            result = {"would_scrub": to_scrub, "would_delete": to_delete}
        else:
            done = await prune(store, settings.prune, progress)
            result = {"scrubbed": done.scrubbed, "deleted": done.deleted}
        if show:
            print(file=sys.stderr)
        if args.json:
            _emit(result)
        else:
            print(" ".join(f"{k}={v}" for k, v in result.items()))
        return EXIT_OK

    return _run(settings, go)


def cmd_grant(args: argparse.Namespace, settings: Settings) -> int:
    statements = grant_statements(args.app_role, args.daemon_role)
    if args.print_sql:
        print(";\n".join(statements) + ";")
        return EXIT_OK

    async def go(store: Store) -> int:
        await store.run_script(statements)
        print(f"granted: {args.app_role} may insert and read emails; {args.daemon_role} may run the daemon")
        return EXIT_OK

    return _run(settings, go)


def register(sub: Any) -> None:
    """Add the operator commands to the main parser's subparsers."""
    p = sub.add_parser("list", help="emails by status, changed recently")
    p.add_argument("--status", action="append", choices=STATUSES, required=True)
    p.add_argument("--since", type=duration, default=duration("1d"), help="e.g. 15m, 1h, 7d (default 1d)")
    p.add_argument("--limit", type=int_in(1, MAX_LIST_LIMIT), default=100,
                   help=f"at most this many rows, 1 to {MAX_LIST_LIMIT} (default 100)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("retry", help="put failed, cancelled or in_doubt emails back to pending now",
                       description=RETRY_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("key", nargs="?", metavar="KEY", type=dedupe_key)
    p.add_argument("--status", choices=RETRYABLE, help="requeue every email with this status ...")
    p.add_argument("--since", type=duration, help="... changed within this window, e.g. 1h")
    p.add_argument("--attempts", type=int_in(1, MAX_ATTEMPTS), metavar="N",
                   help="new tries per email (default: its own max_attempts, else OUTBOX_MAILER_MAX_ATTEMPTS)")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_retry)

    p = sub.add_parser("stats", help="counts per status, due now, age of the oldest due row")
    p.add_argument("--json", action="store_true")
    p.add_argument("--watch", action="store_true", help="refresh in place until Ctrl-C")
    p.add_argument("--interval", type=seconds_in(0.1, 3600), default=2.0,
                   help="seconds between refreshes, 0.1 to 3600 (default 2)")
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser("prune", help="scrub old final emails' content, delete older ones (retention)")
    p.add_argument("--dry-run", action="store_true", help="only count")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_prune)

    p = sub.add_parser("grant", help="least-privilege grants for an application role and a daemon role")
    p.add_argument("--app-role", required=True)
    p.add_argument("--daemon-role", required=True)
    p.add_argument("--print-sql", action="store_true", help="print the statements instead of running them")
    p.set_defaults(func=cmd_grant)


__all__ = ["UsageError", "duration", "register"]
