"""Log lines for journald (``<N>`` prefixes), for terminals (timestamps) and as JSON."""

from __future__ import annotations

import io
import json
import logging
import os
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

import pytest

from outbox_mailer import cli
from outbox_mailer.serving.logs import (
    JsonFormatter,
    TextFormatter,
    configure_logging,
    syslog_priority,
    writes_to_journal,
)

TIMESTAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"


@pytest.fixture(autouse=True)
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    gathered = logging._srcfile, logging.logThreads, logging.logProcesses, logging.logMultiprocessing
    yield
    logging._srcfile, logging.logThreads, logging.logProcesses, logging.logMultiprocessing = gathered
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)


@pytest.fixture
def log_file(tmp_path: Path) -> Iterator[IO[str]]:
    with open(tmp_path / "stderr", "w+", encoding="utf-8") as f:
        yield f


def journal_env(stream: IO[str]) -> dict[str, str]:
    st = os.fstat(stream.fileno())
    return {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}


def lines(stream: IO[str]) -> list[str]:
    stream.flush()
    stream.seek(0)
    return stream.read().splitlines()


def emit_sample() -> None:
    log = logging.getLogger("outbox_mailer")
    log.debug("debug line")
    log.info("info line")
    log.warning("warning line")
    log.error("error line")
    log.critical("critical line")


def test_priorities_follow_syslog() -> None:
    assert [syslog_priority(level) for level in (5, 10, 15, 20, 25, 30, 40, 50, 60)] == [7, 7, 7, 6, 6, 4, 3, 2, 2]


def test_under_journald_each_line_carries_its_priority_and_no_timestamp(log_file: IO[str]) -> None:
    configure_logging("DEBUG", "text", stream=log_file, environ=journal_env(log_file))
    emit_sample()
    assert lines(log_file) == [
        "<7>DEBUG outbox_mailer: debug line",
        "<6>INFO outbox_mailer: info line",
        "<4>WARNING outbox_mailer: warning line",
        "<3>ERROR outbox_mailer: error line",
        "<2>CRITICAL outbox_mailer: critical line",
    ]


def test_under_journald_every_traceback_line_keeps_the_priority(log_file: IO[str]) -> None:
    configure_logging("INFO", "text", stream=log_file, environ=journal_env(log_file))
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        logging.getLogger("outbox_mailer").exception("send failed")
    out = lines(log_file)
    assert out[0] == "<3>ERROR outbox_mailer: send failed"
    assert len(out) > 3 and all(line.startswith("<3>") for line in out)
    assert "<3>ValueError: boom" in out and "<3>second line" in out


def test_plain_text_with_timestamps_outside_journald(log_file: IO[str]) -> None:
    configure_logging("INFO", "text", stream=log_file, environ={})
    emit_sample()
    out = lines(log_file)
    assert len(out) == 4, "DEBUG is below the level"
    assert re.fullmatch(TIMESTAMP + r" INFO outbox_mailer: info line", out[0])
    assert re.fullmatch(TIMESTAMP + r" CRITICAL outbox_mailer: critical line", out[3])
    assert not any(line.startswith("<") for line in out)


@pytest.mark.parametrize("value", ["", "garbage", "1:2", "12:", ":34"])
def test_a_journal_stream_that_is_not_ours_means_plain_text(log_file: IO[str], value: str) -> None:
    # Inherited from a parent whose output went to the journal, but ours goes to a file.
    configure_logging("INFO", "text", stream=log_file, environ={"JOURNAL_STREAM": value})
    logging.getLogger("outbox_mailer").warning("careful")
    [line] = lines(log_file)
    assert re.fullmatch(TIMESTAMP + " WARNING outbox_mailer: careful", line)


def test_a_stream_without_a_file_descriptor_is_never_the_journal() -> None:
    assert writes_to_journal(io.StringIO(), {"JOURNAL_STREAM": "1:2"}) is False


def test_json_lines_carry_time_level_logger_message_and_extra_fields(log_file: IO[str]) -> None:
    configure_logging("INFO", "json", stream=log_file, environ={})
    log = logging.getLogger("outbox_mailer.daemon.service")
    log.info("sent key=%s", "k1", extra={"dedupe_key": "k1", "attempt": 2, "when": datetime(2026, 1, 2)})
    log.warning("Zoë \"quoted\"\nnext line")
    first, second = (json.loads(line) for line in lines(log_file))
    assert set(first) == {"time", "level", "logger", "message", "dedupe_key", "attempt", "when"}
    assert first["level"] == "INFO" and first["logger"] == "outbox_mailer.daemon.service"
    assert first["message"] == "sent key=k1" and first["dedupe_key"] == "k1" and first["attempt"] == 2
    assert first["when"] == "2026-01-02 00:00:00"  # not JSON-serialisable: str()
    assert datetime.fromisoformat(first["time"]).utcoffset().total_seconds() == 0
    assert second["message"] == "Zoë \"quoted\"\nnext line" and second["level"] == "WARNING"


def test_json_includes_the_exception(log_file: IO[str]) -> None:
    configure_logging("INFO", "json", stream=log_file, environ={})
    try:
        raise ZeroDivisionError("division by zero")
    except ZeroDivisionError:
        logging.getLogger("outbox_mailer").exception("oops")
    [line] = lines(log_file)
    data = json.loads(line)
    assert data["level"] == "ERROR" and "ZeroDivisionError" in data["exception"]


def test_json_under_journald_keeps_the_priority_prefix(log_file: IO[str]) -> None:
    configure_logging("INFO", "json", stream=log_file, environ=journal_env(log_file))
    logging.getLogger("outbox_mailer").warning("hm", extra={"key": "k"})
    [line] = lines(log_file)
    assert line.startswith("<4>{")
    assert json.loads(line[3:])["key"] == "k"


def test_configuring_twice_replaces_the_handler(log_file: IO[str]) -> None:
    configure_logging("INFO", "text", stream=log_file, environ={})
    configure_logging("INFO", "json", stream=log_file, environ={})
    logging.getLogger("outbox_mailer").info("once")
    [line] = lines(log_file)
    assert json.loads(line)["message"] == "once"


def test_unknown_format_is_refused(log_file: IO[str]) -> None:
    with pytest.raises(ValueError, match="log format"):
        configure_logging("INFO", "xml", stream=log_file, environ={})  # type: ignore[arg-type]


def test_cli_has_a_global_log_format_option(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    calls = []
    monkeypatch.setattr(cli, "configure_logging", lambda *a, **kw: calls.append((a, kw)))
    assert cli.main(["--log-format", "json", "--log-level", "DEBUG", "migrate", "--print-sql"]) == 0
    assert calls == [(("DEBUG", "json"), {})]
    assert cli.main(["migrate", "--print-sql"]) == 0
    assert calls[-1] == (("INFO", "text"), {})
    with pytest.raises(SystemExit) as exc:
        cli.main(["--log-format", "xml", "migrate"])
    assert exc.value.code == 2
    assert "--log-format" in capsys.readouterr().err


@pytest.mark.parametrize("created", [1767225600.0, 1767225600.999, 1767225601.0005, 1767225601.5, 1798761599.25])
def test_timestamps_made_once_a_second_read_as_made_afresh(created: float) -> None:
    text, js = TextFormatter(), JsonFormatter()
    for at in (created - 1, created):  # the formatters keep the previous second's text
        record = logging.makeLogRecord({"created": at, "msecs": (at - int(at)) * 1000})
        assert text.formatTime(record) == logging.Formatter().formatTime(record)
        assert json.loads(js.format(record))["time"] == datetime.fromtimestamp(at, UTC).isoformat(
            timespec="milliseconds")


class Writes(io.StringIO):
    """A stream that keeps what each write call was given."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)


@pytest.mark.anyio
async def test_a_line_is_written_when_it_is_logged_even_in_a_turn_of_the_loop_that_never_ends() -> None:
    # the last line before the event loop hangs (and the watchdog kills the daemon) or before a kill -9 is
    # the one an operator needs: it must be in the stream already, not waiting for the turn to end
    stream = Writes()
    configure_logging("INFO", "text", stream=stream, environ={})
    logging.getLogger("outbox_mailer").info("the last words")
    assert stream.getvalue().endswith(": the last words\n")
