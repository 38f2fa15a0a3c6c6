"""The recorder's progress line: at most one per PROGRESS_SECONDS, counting what was recorded since the last."""

from __future__ import annotations

import logging

import anyio
import pytest

from outbox_mailer.daemon.recorder import PROGRESS_SECONDS, Recorder

pytestmark = pytest.mark.anyio


async def test_progress_line_sums_up_each_period(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="outbox_mailer")
    recorder = Recorder(None, anyio.Event(), lambda batch: None)  # type: ignore[arg-type]  # no database used

    def lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.getMessage().startswith("recorded ")]

    recorder.counts["sent"] += 5
    recorder._progress(100.0)  # the first batch starts the first period
    recorder.counts["sent"] += 7
    recorder.counts["retried"] += 1
    recorder._progress(100.0 + PROGRESS_SECONDS / 2)
    assert lines() == [], "not before a whole period has passed"
    recorder._progress(100.0 + PROGRESS_SECONDS)
    assert lines() == ["recorded sent=12 failed=0 retried=1 in_doubt=0 claim_lost=0 in the last 10s"]
    recorder._progress(100.0 + 3 * PROGRESS_SECONDS)
    assert len(lines()) == 1, "nothing recorded since: no line"
    recorder.counts["failed"] += 2
    recorder._progress(100.0 + 4 * PROGRESS_SECONDS)
    assert lines()[-1] == "recorded sent=0 failed=2 retried=0 in_doubt=0 claim_lost=0 in the last 10s"
