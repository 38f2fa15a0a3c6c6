"""The recorder's progress line: every PROGRESS_SECONDS while busy, and at once when nothing is left in
flight, counting what was recorded since the last line."""

from __future__ import annotations

import logging

import anyio
import pytest

from outbox_mailer.daemon.recorder import PROGRESS_SECONDS, Recorder

pytestmark = pytest.mark.anyio


def recorder() -> Recorder:
    return Recorder(None, anyio.Event(), lambda batch: None)  # type: ignore[arg-type]  # no database used


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("recorded ")]


async def test_progress_line_sums_up_each_period_while_busy(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="outbox_mailer")
    r = recorder()
    r.counts["sent"] += 5
    r._progress(100.0, drained=False)  # the first batch starts the first period
    r.counts["sent"] += 7
    r.counts["retried"] += 1
    r._progress(100.0 + PROGRESS_SECONDS / 2, drained=False)
    assert lines(caplog) == [], "not before a whole period has passed"
    r._progress(100.0 + PROGRESS_SECONDS, drained=False)
    assert lines(caplog) == ["recorded sent=12 failed=0 retried=1 in_doubt=0 claim_lost=0 in the last 10.0s"]
    r._progress(100.0 + 3 * PROGRESS_SECONDS, drained=False)
    assert len(lines(caplog)) == 1, "nothing recorded since: no line"
    r.counts["failed"] += 2
    r._progress(100.0 + 4 * PROGRESS_SECONDS, drained=False)
    assert lines(caplog)[-1] == "recorded sent=0 failed=2 retried=0 in_doubt=0 claim_lost=0 in the last 10.0s"


async def test_progress_line_comes_at_once_when_nothing_is_left_in_flight(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="outbox_mailer")
    r = recorder()
    r.counts["sent"] += 2
    r._progress(100.0, drained=False)
    r.counts["sent"] += 1
    r._progress(100.5, drained=True)
    assert lines(caplog) == ["recorded sent=3 failed=0 retried=0 in_doubt=0 claim_lost=0 in the last 0.5s"], (
        "a first run's emails are summed up as soon as they are recorded, not a period later")
    r.counts["failed"] += 1
    r._progress(500.0, drained=True)
    assert lines(caplog)[-1] == "recorded sent=0 failed=1 retried=0 in_doubt=0 claim_lost=0 in the last 0.0s", (
        "an idle time between two busy periods is counted in neither")
