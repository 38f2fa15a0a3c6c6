"""What the CLI prints and what it exits with: the one place for both.

Exit codes (defined here only): 0 ok · 1 not found / nothing done · 2 usage,
configuration or bad input · 3 a dependency (database, mail server) is
unreachable. An error of the :class:`~outbox_mailer.errors.OutboxMailerError`
tree becomes its exit code through :func:`exit_code`, the one mapping.

``--json`` prints one JSON object per line (:func:`emit`); the other
functions render the same data as text lines and tables.
"""

from __future__ import annotations

import json
import sys
import uuid
from datetime import datetime
from typing import Any

from ..errors import (
    ConfigurationError,
    DatabaseUnavailable,
    InvalidTransition,
    NotFound,
    OutboxMailerError,
    SchemaMismatch,
    TemplateError,
    TransportUnavailable,
)
from .input import UsageError

EXIT_OK, EXIT_NOTHING, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports SIGINT
EXIT_CODES_HELP = ("exit codes: 0 ok, 1 not found or nothing done, 2 usage or configuration error, "
                   "3 a dependency (database, mail server) is unreachable")

# Error -> exit code: the first row whose types match wins; any other error of the tree is 1.
_EXIT_FOR_ERROR: tuple[tuple[tuple[type[OutboxMailerError], ...], int], ...] = (
    ((ConfigurationError, UsageError, SchemaMismatch, TemplateError), EXIT_USAGE),
    ((NotFound, InvalidTransition), EXIT_NOTHING),
    ((DatabaseUnavailable, TransportUnavailable), EXIT_UNREACHABLE),
)


def exit_code(exc: OutboxMailerError) -> int:
    """The exit code for an error of the tree."""
    for types, code in _EXIT_FOR_ERROR:
        if isinstance(exc, types):
            return code
    return EXIT_NOTHING


def fail(exc: OutboxMailerError) -> int:
    """Report ``exc`` on stderr; return its exit code."""
    print(f"outbox-mailer: {exc}", file=sys.stderr)
    return exit_code(exc)


# ---- JSON lines ------------------------------------------------------------------------


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"cannot serialise {type(value).__name__}")


def emit(obj: dict[str, Any]) -> None:
    """Print one JSON object on one line (``--json``)."""
    print(json.dumps(obj, default=_json_default, ensure_ascii=False), flush=True)


# ---- text ------------------------------------------------------------------------------

STATUS_FIELDS = ("dedupe_key", "status", "attempts", "max_attempts", "transport", "scheduled_at", "sent_at",
                 "provider_message_id", "last_error", "created_at", "updated_at", "message_id", "delivery_event",
                 "delivery_event_at")


def print_status(row: dict[str, Any], as_json: bool) -> None:
    """One email's status: its contract columns as JSON, or one line of text."""
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


def print_table(rows: list[dict[str, Any]]) -> None:
    """Emails as a table (``list``); none: a note on stderr."""
    if not rows:
        print("no emails match", file=sys.stderr)
        return
    print(f"{'dedupe_key':32} {'status':9} {'att':>3}  {'updated_at':25} last_error")
    for r in rows:
        error = (r["last_error"] or "").replace("\n", " ")
        print(f"{r['dedupe_key'][:32]:32} {r['status']:9} {r['attempts']:>3}  "
              f"{r['updated_at'].isoformat(timespec='seconds'):25} {error[:80]}")


def stats_lines(stats: dict[str, Any]) -> list[str]:
    """``name  value`` lines (``stats``): floats to one decimal, a missing value as ``-``; a nested
    mapping (``transports``: name -> its limits' use) as ``transports.NAME.FIELD`` lines."""
    def show(value: Any) -> str:
        return "-" if value is None else f"{value:.1f}" if isinstance(value, float) else str(value)

    lines = []
    for name, value in stats.items():
        if isinstance(value, dict):
            lines += [f"{name}.{inner}.{field:27} {show(v)}" for inner, fields in value.items()
                      for field, v in fields.items()]
        else:
            lines.append(f"{name:24} {show(value)}")
    return lines


def check_line(check: str, ok: bool, detail: Any) -> str:
    """``[ok] name: detail`` or ``[FAIL] name: detail`` (``check``); a dict detail indented as JSON."""
    text = json.dumps(detail, indent=2) if isinstance(detail, dict) else detail
    return f"[{'ok' if ok else 'FAIL'}] {check}: {text}"
