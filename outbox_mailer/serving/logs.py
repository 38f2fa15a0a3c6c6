"""Logging set-up for the command line: plain text, journald, or JSON lines.

* Under systemd (``$JOURNAL_STREAM`` names the stream we write to), every line
  starts with a ``<N>`` syslog priority (DEBUG 7, INFO 6, WARNING 4, ERROR 3,
  CRITICAL 2) and carries no timestamp: journald adds its own, and the prefix
  makes ``journalctl -p warning`` filter correctly. Each line of a multi-line
  record (a traceback) gets the prefix, because journald stores every line as
  its own entry.
* Otherwise text lines with a timestamp: ``2026-01-01 12:00:00,000 INFO name: message``.
* ``--log-format json``: one JSON object per line with ``time`` (UTC, ISO 8601),
  ``level``, ``logger``, ``message``, every ``extra=`` field, and ``exception``
  when there is one. Under journald the ``<N>`` prefix goes in front of each object.

A line per recorded email makes a line's cost part of the daemon's cost per email
(bench/README.md states it): the formatters make a timestamp's seconds once per
second, the JSON one encodes with one encoder made once, :func:`configure_logging`
turns off what no format here shows (the caller's file and line, thread and process
names: the logging HOWTO's "Optimization"). Each line is written when it is logged: the
last line before a hang or a kill is the one an operator needs.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import IO, Any, Literal

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
JOURNAL_TEXT_FORMAT = "%(levelname)s %(name)s: %(message)s"

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def syslog_priority(levelno: int) -> int:
    """The syslog priority journald should store for a Python log level."""
    if levelno >= logging.CRITICAL:
        return 2
    if levelno >= logging.ERROR:
        return 3
    if levelno >= logging.WARNING:
        return 4
    if levelno >= logging.INFO:
        return 6
    return 7


def writes_to_journal(stream: IO[str], environ: Mapping[str, str] | None = None) -> bool:
    """True when ``$JOURNAL_STREAM`` (``DEVICE:INODE``) is the file ``stream`` writes to.

    systemd sets the variable for a service whose stdout/stderr is the journal;
    comparing it with the stream itself keeps a child whose output was
    redirected elsewhere from writing priority prefixes into a file.
    """
    value = (os.environ if environ is None else environ).get("JOURNAL_STREAM", "")
    device, sep, inode = value.partition(":")
    if not sep or not device.isdigit() or not inode.isdigit():
        return False
    try:
        st = os.fstat(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return False
    return (st.st_dev, st.st_ino) == (int(device), int(inode))


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _RECORD_ATTRIBUTES and not k.startswith("_")}


class TextFormatter(logging.Formatter):
    """The standard formatter, its timestamp's date and time made once per second."""

    _second, _stamp = -1, ""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        if second != self._second:
            self._second, self._stamp = second, time.strftime(self.default_time_format, self.converter(second))
        return f"{self._stamp},{int(record.msecs):03d}"  # the standard formatter's default_msec_format


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    _second, _stamp = -1, ""
    _encoder = json.JSONEncoder(default=str, ensure_ascii=False)  # json.dumps with options makes one per call

    def utc_time(self, record: logging.LogRecord) -> str:
        """``2026-01-01T12:00:00.000+00:00``, its seconds made once per second."""
        second = int(record.created)
        if second != self._second:
            self._second, self._stamp = second, datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        return f"{self._stamp}.{int(record.msecs):03d}+00:00"

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": self.utc_time(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in extra_fields(record).items():
            data.setdefault(key, value)
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            data["stack"] = self.formatStack(record.stack_info)
        return self._encoder.encode(data)


class JournalFormatter(logging.Formatter):
    """Prefix every line of the inner formatter's output with ``<N>``."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        prefix = f"<{syslog_priority(record.levelno)}>"
        return "\n".join(prefix + line for line in self.inner.format(record).splitlines() or [""])


def make_formatter(log_format: LogFormat, *, journal: bool) -> logging.Formatter:
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format {log_format!r}: expected one of {', '.join(LOG_FORMATS)}")
    if log_format == "json":
        inner: logging.Formatter = JsonFormatter()
    else:
        inner = TextFormatter(JOURNAL_TEXT_FORMAT if journal else TEXT_FORMAT)
    return JournalFormatter(inner) if journal else inner


def configure_logging(level: str | int = "INFO", log_format: LogFormat = "text", *, stream: IO[str] | None = None,
                      environ: Mapping[str, str] | None = None) -> logging.Handler:
    """Replace the root logger's handlers with one that writes to ``stream`` (stderr)."""
    stream = sys.stderr if stream is None else stream
    handler = logging.StreamHandler(stream)
    handler.setFormatter(make_formatter(log_format, journal=writes_to_journal(stream, environ)))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(level)
    # gathered for every record and shown by no format here
    logging._srcfile = None  # the caller's file and line (a walk up the stack per record)
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    logging.getLogger("httpx").setLevel(logging.WARNING)  # httpx logs every request at INFO; we log outcomes
    return handler
