"""The argument parser: global options, then each command group's ``register()``."""

from __future__ import annotations

import argparse

from .. import __version__
from ..serving.logs import LOG_FORMATS
from .console_commands import register as register_console_commands
from .email_commands import register as register_email_commands
from .event_commands import register as register_event_commands
from .output import EXIT_CODES_HELP
from .pause_commands import register as register_pause_commands
from .queue_commands import register as register_queue_commands
from .service_commands import register as register_service_commands
from .setup_commands import register as register_setup_commands
from .template_commands import register as register_template_commands

DESCRIPTION = "outbox-mailer: the transactional-email outbox daemon and its operator commands."

# Each group's register(), in the order `outbox-mailer --help` lists the commands:
# migrate run · status enqueue cancel resolve · list retry stats prune · webhooks ingest-dsn suppress
# unsuppress suppressions events · pause resume · template · console console-user · grant check demo sink.
GROUPS = (register_service_commands, register_email_commands, register_queue_commands, register_event_commands,
          register_pause_commands, register_template_commands, register_console_commands, register_setup_commands)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="outbox-mailer", description=DESCRIPTION, epilog=EXIT_CODES_HELP)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--log-format", default="text", choices=list(LOG_FORMATS),
                        help="text (with <N> priority prefixes under journald) or one JSON object per line")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in GROUPS:
        register(sub)
    return parser
