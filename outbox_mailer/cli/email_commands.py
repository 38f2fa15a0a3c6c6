"""Commands on one email, named by its dedupe key: status, enqueue, cancel, resolve, and retry KEY.

``retry`` is one command for one email or many; its parser lives with the
queue commands (:mod:`outbox_mailer.cli.queue_commands`), which call
:func:`retry_one` for a KEY.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from typing import Any

from ..delivery import Status
from ..errors import DatabaseError, DatabaseUnavailable, NotFound, SchemaMismatch
from ..settings.config import Settings
from ..store import Store
from .database import run_with_store
from .input import UsageError, dedupe_key, int_in, json_object, parse_time, read_email, stdin_limit
from .output import EXIT_NOTHING, EXIT_OK, emit, print_status


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    async def go(store: Store) -> int:
        rows = {r["dedupe_key"]: r for r in await store.status(args.keys)}
        missing = [k for k in args.keys if k not in rows]
        for key in args.keys:
            if key in rows:
                print_status(rows[key], args.json)
        for key in missing:
            print(f"outbox-mailer: no email with dedupe key {key!r}", file=sys.stderr)
        return EXIT_NOTHING if missing else EXIT_OK

    return run_with_store(settings, go)


# ---- enqueue ---------------------------------------------------------------------------


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

    return run_with_store(settings, go)


def _email_from_stdin(settings: Settings) -> dict[str, Any]:
    limit = stdin_limit(settings.max_message_bytes)
    return read_email(sys.stdin.buffer.read(limit + 1), limit)


def _email_from_flags(args: argparse.Namespace) -> dict[str, Any]:
    if not args.to:
        raise UsageError("enqueue needs --to (or --stdin with a JSON object)")
    headers = {}
    for item in args.header or []:
        name, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--header {item!r}: expected NAME=VALUE")
        headers[name] = value
    email: dict[str, Any] = {
        "from_address": args.from_address, "to_addresses": args.to, "cc_addresses": args.cc or [],
        "bcc_addresses": args.bcc or [], "reply_to": args.reply_to, **_content_from_flags(args),
        "headers": headers, "transport": args.transport, "priority": args.priority,
        "scheduled_at": parse_time("--scheduled-at", args.scheduled_at) if args.scheduled_at else None,
    }
    if args.key is not None:  # an empty --key is refused by its type, never replaced by a random one
        email["dedupe_key"] = args.key
    return email


def _content_from_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The email's own subject and bodies, or a stored template with its data and locale: one or the other."""
    if args.template is None:
        if args.data is not None or args.locale is not None:
            raise UsageError("--data and --locale need --template")
        if args.subject is None or (args.text is None and args.html is None):
            raise UsageError("enqueue needs --subject and --text or --html, or --template NAME")
        return {"subject": args.subject, "text_body": args.text, "html_body": args.html}
    if (args.subject, args.text, args.html) != (None, None, None):
        raise UsageError("give --template or --subject, --text and --html, not both")
    data = None if args.data is None else json_object("--data", args.data)  # None: the INSERT makes it {}
    return {"template": args.template, "template_data": data, "locale": args.locale}


# ---- changing one email's status -----------------------------------------------------------


def cmd_cancel(args: argparse.Namespace, settings: Settings) -> int:
    async def go(store: Store) -> int:
        await store.cancel(args.key)
        print(f"cancelled {args.key}")
        return EXIT_OK

    return run_with_store(settings, go)


def cmd_resolve(args: argparse.Namespace, settings: Settings) -> int:
    status = Status.SENT.value if args.sent else Status.FAILED.value

    async def go(store: Store) -> int:
        await store.resolve(args.key, status)
        print(f"resolved {args.key} as {status}")
        return EXIT_OK

    return run_with_store(settings, go)


def retry_one(key: str, attempts: int | None, settings: Settings) -> int:
    """``retry KEY``: back to pending with ``attempts`` new tries (default: its own max_attempts)."""
    async def go(store: Store) -> int:
        tries = attempts
        if tries is None:  # the row's own limit, else the configured default
            rows = await store.status([key])
            if not rows:
                raise NotFound(key)
            tries = rows[0]["max_attempts"] or settings.max_attempts
        await store.retry(key, tries)
        print(f"requeued {key} ({tries} new {'try' if tries == 1 else 'tries'})")
        return EXIT_OK

    return run_with_store(settings, go)


# ---- parser ---------------------------------------------------------------------------------


def register(sub: Any) -> None:
    """Add status, enqueue, cancel and resolve to the main parser's subparsers."""
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
    p.add_argument("--template", metavar="NAME", help="a stored template instead of --subject, --text and --html")
    p.add_argument("--data", metavar="JSON", help="the template's data, a JSON object (default {})")
    p.add_argument("--locale", metavar="L", help="the template's locale, like pt-BR (default: its default locale)")
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
