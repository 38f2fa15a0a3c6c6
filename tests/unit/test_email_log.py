"""One recorded email's log line: its fields from the recorded write, its level from the outcome, its text
made from the same fields, and nothing built when its level is off."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from outbox_mailer.daemon.email_log import FIELDS
from outbox_mailer.daemon.recorder import Recorder
from outbox_mailer.delivery import Outcome
from tests.daemon_fakes import context
from tests.unit.test_executor import carried
from tests.unit.test_outcome_counts import write_of


def logged(caplog: pytest.LogCaptureFixture, outcome: Outcome, *, applied: bool = True,
           rescue: bool = False) -> logging.LogRecord:
    caplog.clear()
    recorder = Recorder(None, None, None)  # type: ignore[arg-type]  # only its logging is used
    recorder._log(write_of(outcome, rescue=rescue), applied)
    [record] = caplog.records
    return record


def test_a_rescue_says_so_and_has_no_send_duration(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="outbox_mailer")
    record = logged(caplog, Outcome.ambiguous("claimer died"), rescue=True)
    assert (record.levelno, record.outcome, record.rescue) == (logging.INFO, "retried", True)
    assert not hasattr(record, "duration_ms"), "a rescue's times are the dead claim's, not a send's"
    assert record.getMessage().startswith("retried key=k via smtp attempt 1 - (rescue), retry in ")
    assert record.getMessage().endswith(" s: claimer died")


def test_a_lost_claim_is_a_warning_that_names_the_attempt_not_applied(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="outbox_mailer")
    record = logged(caplog, Outcome.sent(provider_message_id="id-123"), applied=False)
    assert (record.levelno, record.outcome, record.duration_ms) == (logging.WARNING, "claim_lost", 2000.0)
    assert not hasattr(record, "provider_message_id"), "nothing was recorded as sent"
    assert record.getMessage() == ("claim lost key=k via smtp attempt 1 - 2000 ms: not applied: "
                                   "the row changed under us (the attempt was sent)")


def test_a_claim_given_back_untried_is_logged_at_debug_only(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="outbox_mailer")
    record = logged(caplog, Outcome.unstarted("waited too long to start"))
    assert (record.levelno, record.outcome) == (logging.DEBUG, "given_back")
    assert record.getMessage().startswith("given back key=k ")


def test_no_line_is_built_when_its_level_is_off(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="outbox_mailer")
    recorder = Recorder(None, None, None)  # type: ignore[arg-type]  # only its logging is used
    recorder._log(write_of(Outcome.sent()), True)
    assert caplog.records == [] and recorder.counts["sent"] == 1, "counted, not logged"


def test_the_logs_page_lists_every_field_a_line_may_carry() -> None:
    page = (Path(__file__).parents[2] / "docs" / "logs.md").read_text(encoding="utf-8")
    listed = re.findall(r"^\| `(\w+)` \|", page, re.MULTILINE)
    assert listed == list(FIELDS)


@pytest.mark.anyio
async def test_a_failover_and_an_internal_error_carry_the_emails_fields(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="outbox_mailer")
    await carried(context(), Outcome.unreachable("connection refused"))  # api, its fallback, is open
    await carried(context(), None)  # the scripted transport has no answer: the send raises
    fields = [(r.getMessage().split()[0], r.dedupe_key, r.transport, r.attempt, r.outcome)
              for r in caplog.records if r.getMessage().startswith(("failover", "unexpected"))]
    assert fields == [("failover", "k-1", "smtp", 1, "failover"), ("unexpected", "k-1", "smtp", 1, "internal_error")]
