"""Commands on many emails, the queue as a whole: list, retry (one KEY, or --status in bulk), stats, prune."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import Any

import anyio

from ..daemon.quotas import transport_use
from ..daemon.retention import prune
from ..delivery import Status
from ..settings.config import Settings
from ..store import Store
from ..store.limits import LimitStore
from .database import run_with_store
from .email_commands import retry_one
from .input import UsageError, dedupe_key, duration, int_in, seconds_in
from .output import EXIT_NOTHING, EXIT_OK, emit, print_table, stats_lines

STATUSES = tuple(s.value for s in Status)
RETRYABLE = tuple(s.value for s in (Status.FAILED, Status.CANCELLED, Status.IN_DOUBT))
MAX_LIST_LIMIT = 100_000
MAX_ATTEMPTS = 1000  # like OUTBOX_MAILER_MAX_ATTEMPTS
RETRY_HELP = """\
Put failed, cancelled or in_doubt emails back to pending, due now. An email
whose content retention removed (prune) cannot be retried: retry KEY refuses
it, and a bulk retry leaves it out and says how many it left.

How many new tries: retry KEY gives the email as many new tries as its own
max_attempts column says (the configured OUTBOX_MAILER_MAX_ATTEMPTS when that
column is null), so an email enqueued with max_attempts = 1 gets one more try,
not eight; a bulk retry (--status ... --since ...) does the same for each email.
--attempts N overrides both. The row's max_attempts becomes attempts made so
far + the new tries (so a second retry of that email gives it two).
"""


def cmd_list(args: argparse.Namespace, settings: Settings) -> int:
    async def go(store: Store) -> int:
        rows = await store.list_by_status(args.status, args.since, args.limit)
        if args.json:
            for row in rows:
                emit(row)
        else:
            print_table(rows)
        return EXIT_OK if rows else EXIT_NOTHING

    return run_with_store(settings, go)


# ---- retry (one key, or in bulk) ----------------------------------------------------------


def cmd_retry(args: argparse.Namespace, settings: Settings) -> int:
    if (args.key is None) == (args.status is None):
        raise UsageError("retry takes a KEY, or --status STATUS --since DURATION for many")
    if args.key is not None:
        return retry_one(args.key, args.attempts, settings)
    if args.since is None:
        raise UsageError("a bulk retry needs --since (for example --since 1h)")
    return _retry_bulk(args, settings)


def _retry_bulk(args: argparse.Namespace, settings: Settings) -> int:
    async def go(store: Store) -> int:
        count, scrubbed = await store.count_retryable(args.status, args.since)
        if scrubbed:
            print(f"{scrubbed} {args.status} emails whose content retention removed cannot be retried "
                  "(enqueue them again under new dedupe keys); they are left as they are", file=sys.stderr)
        if count == 0:
            print(f"no {args.status} emails to retry changed in that window", file=sys.stderr)
            return EXIT_NOTHING
        if not args.yes and not _confirm(f"requeue {count} {args.status} emails?"):
            print("nothing requeued", file=sys.stderr)
            return EXIT_NOTHING
        done = await store.retry_bulk(args.status, args.since, args.attempts, settings.max_attempts)
        if args.json:
            emit({"status": args.status, "requeued": done})
        else:
            print(f"requeued {done} emails")
        return EXIT_OK

    return run_with_store(settings, go)


def _confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        raise UsageError(f"{question} (no terminal to ask on: add --yes)")
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


# ---- stats (--watch) and prune ---------------------------------------------------------------


def cmd_stats(args: argparse.Namespace, settings: Settings) -> int:
    async def show(store: Store) -> None:
        limits = {name: t for name, t in settings.all_transports().items() if t.limited}
        ledger = LimitStore(store=store)  # the command's own pool, each refresh
        while True:
            stats = await store.stats()
            stats["transports"] = await transport_use(limits, ledger)
            if args.json:
                emit(stats)
            elif args.watch and sys.stdout.isatty():
                print("\x1b[H\x1b[2J" + time.strftime("%H:%M:%S  ") + "outbox-mailer stats (Ctrl-C to quit)")
                print("\n".join(stats_lines(stats)), flush=True)
            else:
                print("\n".join(stats_lines(stats)), flush=True)
            if not args.watch:
                return
            await anyio.sleep(args.interval)

    async def go(store: Store) -> int:
        """``--watch`` ends at SIGINT or SIGTERM by cancelling the refresh, wherever it is (a query in
        flight included), so the store closes its pool in order instead of being torn by KeyboardInterrupt."""
        async with anyio.create_task_group() as tg:
            async def stop_on_signal() -> None:
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for _ in signals:
                        tg.cancel_scope.cancel()
                        return

            if args.watch:
                tg.start_soon(stop_on_signal)
            await show(store)
            tg.cancel_scope.cancel()
        return EXIT_OK

    try:
        return run_with_store(settings, go)
    except KeyboardInterrupt:  # before the signal receiver was listening
        return EXIT_OK


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
            result = {"scrubbed": done.scrubbed, "deleted": done.deleted,
                      "unmatched_events": done.unmatched_events, "webhook_tokens": done.webhook_tokens}
        if show:
            print(file=sys.stderr)
        if args.json:
            emit(result)
        else:
            print(" ".join(f"{k}={v}" for k, v in result.items()))
        return EXIT_OK

    return run_with_store(settings, go)


# ---- parser ---------------------------------------------------------------------------------


def register(sub: Any) -> None:
    """Add list, retry, stats and prune to the main parser's subparsers."""
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
