"""The outbox-mailer command: the daemon and its operator commands.

Exit codes: 0 ok · 1 not found / nothing done · 2 usage, configuration or bad
input · 3 a dependency (database, mail server) is unreachable. ``--json``
prints one JSON object per line. Every command except ``demo`` and ``sink`` loads and
validates the settings first (exit 2 naming the setting); arguments, the
``enqueue --stdin`` object and ``--data`` are parsed strictly by :mod:`outbox_mailer.cli.input`.

The package, by responsibility (imports only run downwards, no cycles)::

    __init__          main(): parse, configure logging, load settings, run, map errors to exit codes
    parser            build_parser(): global options + each group's register()
    service_commands  migrate, run
    email_commands    one email: status, enqueue, cancel, resolve, retry KEY
    queue_commands    many emails: list, retry (KEY or --status), stats, prune
    event_commands    after the send: webhooks, ingest-dsn, suppress, unsuppress, suppressions, events
    pause_commands    transports: pause, resume
    console_commands  the operator console: console, console-user add|remove|list
    setup_commands    grant, check, demo, sink
    database          with_store(): one Store for one action
    output            exit codes, error -> exit code, JSON lines, text and tables
    input             argument types, the enqueue --stdin object, --data's JSON object, UsageError
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ..errors import OutboxMailerError
from ..serving.logs import configure_logging
from ..settings.config import Settings, load_settings
from .output import EXIT_INTERRUPTED, EXIT_OK, fail
from .parser import build_parser

__all__ = ["build_parser", "main"]

SETTINGS_FREE = ("demo", "sink")  # commands that read no setting: a broken configuration does not stop them


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    try:
        settings = load_settings() if args.command not in SETTINGS_FREE else Settings()
        code: int = args.func(args, settings)
        return code
    except OutboxMailerError as exc:
        return fail(exc)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `outbox-mailer ... | head`: the reader left; not an error of ours
        sys.stderr.close()
        return EXIT_OK
