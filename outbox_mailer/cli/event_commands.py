"""After the send: webhooks (the event receiver), ingest-dsn, suppress, unsuppress, suppressions, events."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from datetime import timedelta
from typing import Any

import anyio

from ..clock import utc_now
from ..delivery_events.suppression import REASONS, normal_address
from ..delivery_events.unsubscribe import CATEGORY
from ..errors import ConfigurationError, DatabaseError, NotFound
from ..settings.config import Settings
from ..store import EventStore
from .database import run_with_store
from .input import duration
from .output import EXIT_OK, emit

log = logging.getLogger("outbox_mailer")
EXIT_TEMPFAIL = 75  # sysexits EX_TEMPFAIL: the MTA keeps the bounce and pipes it again later


def cmd_webhooks(args: argparse.Namespace, settings: Settings) -> int:
    cfg = settings.webhooks
    settings.require_database_url()
    address = cfg.address
    if address is None:
        raise ConfigurationError("OUTBOX_MAILER_WEBHOOKS__ADDRESS is not set: where should the receiver listen?",
                                 setting="OUTBOX_MAILER_WEBHOOKS__ADDRESS")
    if not cfg.enabled() and not settings.unsubscribe.enabled():
        raise ConfigurationError("no provider's webhook secret is set (for example "
                                 "OUTBOX_MAILER_WEBHOOKS__RESEND__SECRET) and no OUTBOX_MAILER_UNSUBSCRIBE__KEYS: "
                                 "the receiver would refuse everything")
    # imported here for start-up time: starlette, uvicorn, prometheus_client serve this command alone
    import httpx

    from ..receiver.server import Receiver, build_app
    from ..serving.http_server import serve_http
    from ..serving.systemd import SystemdNotifier

    async def go(store: EventStore) -> int:
        await store.require_schema()
        async with httpx.AsyncClient(trust_env=True, follow_redirects=False) as http:
            receiver = Receiver(cfg, store, automatic_suppression=settings.suppression.automatic, http=http,
                                unsubscribe=settings.unsubscribe.signer())
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async with serve_http(build_app(receiver), address, setting="OUTBOX_MAILER_WEBHOOKS__ADDRESS",
                                      exempt=cfg.proxy_networks()) as (host, port):
                    log.info("webhooks listening on %s:%d for %s", host, port, ", ".join(sorted(receiver.enabled)))
                    notifier = SystemdNotifier()
                    notifier.notify("READY=1")
                    async for signum in signals:
                        log.info("received %s: stopping", signal.Signals(signum).name)
                        notifier.notify("STOPPING=1")
                        break
        return EXIT_OK

    return run_with_store(settings, go, EventStore)


RECIPIENT_VARIABLES = ("ORIGINAL_RECIPIENT", "RECIPIENT")  # what Postfix's local(8) sets for a piped command


def envelope_recipient(args: argparse.Namespace) -> str | None:
    """The address the bounce was delivered to: ``--recipient``, else the MTA's environment."""
    if args.recipient:
        return str(args.recipient)
    return next((os.environ[name] for name in RECIPIENT_VARIABLES if os.environ.get(name)), None)


def cmd_ingest_dsn(args: argparse.Namespace, settings: Settings) -> int:
    from ..delivery_events.bounce_tags import Unproven, day_of
    from ..delivery_events.dsn import parse_dsn
    from ..receiver.intake import take_in

    raw = sys.stdin.buffer.read(64 * 1024 * 1024 + 1)
    now = utc_now()
    events = parse_dsn(raw, now)
    if events is None:
        log.info("ingest-dsn: not a delivery status notification (%d bytes); ignored", len(raw))
        return EXIT_OK
    if not events:
        log.info("ingest-dsn: a delivery status notification without a usable recipient; ignored")
        return EXIT_OK
    tags, recipient = settings.bounces.tags(), envelope_recipient(args)
    proof = tags.read(recipient, day_of(now)) if tags is not None and recipient else Unproven.UNTAGGED
    if proof is Unproven.FORGED:
        log.warning("ingest-dsn: the bounce came to %r, a bounce address tag that does not verify: it proves "
                    "nothing and suppresses nobody", recipient)

    async def go(store: EventStore) -> int:
        intake = await take_in(store, events, automatic=settings.suppression.automatic, now=now, proof=proof)
        log.info("ingest-dsn: %d event(s) recorded, %d already known, %d unmatched, %d refused", intake.recorded,
                 intake.duplicates, intake.unmatched, intake.refused)
        return EXIT_OK

    try:
        return run_with_store(settings, go, EventStore)
    except DatabaseError as exc:
        print(f"outbox-mailer: ingest-dsn: {exc}; the MTA should retry", file=sys.stderr)
        return EXIT_TEMPFAIL


def _address(text: str) -> str:
    try:
        return normal_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _category(text: str) -> str:
    if not CATEGORY.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r}: a category is 1-64 of a-z 0-9 . _ -, starting with a letter "
                                         "or digit")
    return text


def _scope(scope: str) -> str:
    """How a suppression's scope reads: '' is all mail."""
    return f"category {scope}" if scope else "all mail"


def cmd_suppress(args: argparse.Namespace, settings: Settings) -> int:
    expires = utc_now() + timedelta(seconds=args.expires_in) if args.expires_in is not None else None

    async def go(store: EventStore) -> int:
        row = await store.suppress(args.address, args.reason, "operator", expires, args.category or "")
        emit(row) if args.json else print(f"suppressed {row['address']} for {_scope(row['scope'])} ({row['reason']}"
                                          + (f", until {expires.isoformat()})" if expires else ")"))
        return EXIT_OK

    return run_with_store(settings, go, EventStore)


def cmd_unsuppress(args: argparse.Namespace, settings: Settings) -> int:
    async def go(store: EventStore) -> int:
        scope = args.category or ""
        if not await store.unsuppress(args.address, scope):
            raise NotFound(args.address, f"{args.address} is not suppressed" + (f" for {scope}" if scope else ""))
        print(f"unsuppressed {args.address} for {_scope(scope)}")
        return EXIT_OK

    return run_with_store(settings, go, EventStore)


def cmd_suppressions(args: argparse.Namespace, settings: Settings) -> int:
    async def go(store: EventStore) -> int:
        now = utc_now()
        for row in await store.suppressions():
            if args.json:
                emit(row)
                continue
            expired = row["expires_at"] is not None and row["expires_at"] <= now
            until = f"  until {row['expires_at'].isoformat()}" + (" (expired)" if expired else "") \
                if row["expires_at"] else ""
            print(f"{row['address']}  {_scope(row['scope'])}  {row['reason']}  from {row['source']}"
                  f"  since {row['created_at'].isoformat()}" + until)
        return EXIT_OK

    return run_with_store(settings, go, EventStore)


def cmd_events(args: argparse.Namespace, settings: Settings) -> int:
    async def go(store: EventStore) -> int:
        rows = await store.events_of(args.key)
        if not rows and not await store.status([args.key]):
            raise NotFound(args.key)
        for row in rows:
            if args.json:
                emit(row)
                continue
            kind = row["kind"] + (f"/{row['bounce_class']}" if row["bounce_class"] else "")
            when = (row["occurred_at"] or row["received_at"]).isoformat()
            print(f"{when}  {row['provider']}  {kind}  {row['recipient'] or '-'}")
        return EXIT_OK

    return run_with_store(settings, go, EventStore)


def register(sub: Any) -> None:
    """Add webhooks, ingest-dsn, suppress, unsuppress, suppressions and events."""
    p = sub.add_parser("webhooks", help="receive provider delivery events over HTTP until SIGTERM")
    p.set_defaults(func=cmd_webhooks)

    p = sub.add_parser("ingest-dsn", help="record one bounce message (RFC 3464) read from stdin, as an MTA pipes it")
    p.add_argument("--recipient", metavar="ADDRESS",
                   help="the envelope recipient it was delivered to (default: $ORIGINAL_RECIPIENT, else $RECIPIENT)")
    p.set_defaults(func=cmd_ingest_dsn)

    p = sub.add_parser("suppress", help="stop sending to an address")
    p.add_argument("address", type=_address)
    p.add_argument("--category", type=_category, help="only the emails of this category (default: all mail)")
    p.add_argument("--reason", choices=REASONS, default="manual")
    p.add_argument("--expires-in", type=duration, metavar="DURATION", help="lift it after 90s, 15m, 1h, 7d...")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_suppress)

    p = sub.add_parser("unsuppress", help="send to a suppressed address again")
    p.add_argument("address", type=_address)
    p.add_argument("--category", type=_category, help="lift the suppression of this category (default: all mail)")
    p.set_defaults(func=cmd_unsuppress)

    p = sub.add_parser("suppressions", help="list suppressed addresses, newest first")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_suppressions)

    p = sub.add_parser("events", help="one email's delivery events, oldest first")
    p.add_argument("key", metavar="KEY")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_events)


__all__ = ["EXIT_TEMPFAIL", "register"]
