"""The daemon and its schema: migrate, run."""

from __future__ import annotations

import argparse
import contextlib
from typing import Any

import anyio

from ..daemon.supervisor import supervise
from ..serving.systemd import SystemdNotifier
from ..settings.config import Settings
from ..store import Store
from ..store.migrations import load_migrations
from .database import run_with_store
from .input import UsageError
from .output import EXIT_OK


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

    return run_with_store(settings, go)


def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    settings.require_database_url()
    if args.processes < 1:
        raise UsageError("--processes must be at least 1")
    if args.processes > 1:
        return supervise(args.processes, ["--log-level", args.log_level, "--log-format", args.log_format],
                         metrics_address=settings.metrics_address, worker_name=settings.worker_name)
    # Imported here, not at the top, for start-up time only (no cycle): the daemon (~40 ms) and
    # the transports' client libraries (httpx, aiosmtplib: ~130 ms) serve `run` and `check`
    # alone, metrics (prometheus_client, starlette: ~100 ms) only when metrics_address is set.
    from ..daemon.service import Daemon
    from ..daemon.transport_factory import build_transports

    async def go() -> int:
        transports = build_transports(settings)
        try:
            metrics = None
            if settings.metrics_address:
                from ..daemon.metrics import Metrics  # start-up time, see above

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


def register(sub: Any) -> None:
    """Add migrate and run to the main parser's subparsers."""
    p = sub.add_parser("migrate", help="create or upgrade the schema (idempotent)")
    p.add_argument("--print-sql", action="store_true", help="print every migration's SQL instead of running it")
    p.set_defaults(func=cmd_migrate)

    p = sub.add_parser("run", help="run the daemon until SIGTERM/SIGINT")
    p.add_argument("--processes", type=int, default=1, metavar="N",
                   help="run N daemon processes under one parent (one Python process uses one core)")
    p.set_defaults(func=cmd_run)
