"""What a recorded write counts as comes from its typed fields (the outcome's cause, the attempt's
rescue flag), never from its error text or its worker's label; the recorder and the metrics count
from that one tally."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from outbox_mailer.daemon.metrics import Metrics
from outbox_mailer.daemon.tally import Counted, tally
from outbox_mailer.decide import RetryPolicy, decide
from outbox_mailer.delivery import Delivery, Outcome
from outbox_mailer.settings.config import Settings
from outbox_mailer.store import AttemptRecord, OutcomeWrite

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def write_of(outcome: Outcome, *, worker: str = "w", rescue: bool = False) -> OutcomeWrite:
    d = Delivery(id=1, dedupe_key="k", claim_token=None, attempts=1, max_attempts=None, from_address=None,
                 to_addresses=("a@example.com",), cc_addresses=(), bcc_addresses=(), reply_to=None, subject="s",
                 text_body="b", html_body=None, headers={}, attachments=[], metadata={}, transport=None, priority=0,
                 scheduled_at=NOW, expires_at=None, created_at=NOW)
    t = decide(d, outcome, NOW, RetryPolicy(), 0.5)
    attempt = AttemptRecord(1, NOW - timedelta(seconds=2), NOW, outcome.kind, None, None, outcome.error, "smtp",
                            worker, rescue=rescue)
    return OutcomeWrite(d, t, attempt)


def metrics() -> Metrics:
    return Metrics(Settings(database_url="postgresql://u@127.0.0.1:1/db"))


def suppressed_count(m: Metrics) -> float | None:
    return m.registry.get_sample_value("outbox_mailer_emails_suppressed_total", {"transport": "smtp"})


def timed_sends(m: Metrics, outcome: str) -> float | None:
    return m.registry.get_sample_value("outbox_mailer_send_duration_seconds_count",
                                       {"transport": "smtp", "outcome": outcome})


def test_a_suppressed_outcome_counts_as_suppressed_whatever_its_error_text() -> None:
    m = metrics()
    m.recorded(write_of(Outcome.suppressed("every recipient bounced earlier")), True)
    assert suppressed_count(m) == 1
    assert m.registry.get_sample_value("outbox_mailer_emails_failed_total", {"transport": "smtp"}) == 1


def test_an_unsendable_row_whose_error_reads_suppressed_is_not_counted_suppressed() -> None:
    m = metrics()
    m.recorded(write_of(Outcome.unsendable("suppressed: a subject line that says so")), True)
    assert (suppressed_count(m) or 0) == 0
    assert m.registry.get_sample_value("outbox_mailer_emails_failed_total", {"transport": "smtp"}) == 1


def test_a_rescue_is_not_timed_as_a_send_whatever_its_worker_label() -> None:
    m = metrics()
    m.recorded(write_of(Outcome.ambiguous("claimer died"), worker="host-1", rescue=True), True)
    assert timed_sends(m, "ambiguous") is None
    assert m.registry.get_sample_value("outbox_mailer_ambiguous_outcomes_total", {"transport": "smtp"}) == 1


def test_an_attempt_of_a_worker_named_like_a_rescuer_is_timed_as_a_send() -> None:
    m = metrics()
    m.recorded(write_of(Outcome.sent("q"), worker="rescuer of-nothing"), True)
    assert timed_sends(m, "sent") == 1


def test_the_tally_of_a_write_follows_its_status_its_fence_and_its_cause() -> None:
    assert tally(write_of(Outcome.sent("q")), True).counted is Counted.SENT
    assert tally(write_of(Outcome.transient("451")), True).counted is Counted.RETRIED
    assert tally(write_of(Outcome.sent("q")), False).counted is Counted.CLAIM_LOST
    assert tally(write_of(Outcome.unstarted("late")), True).counted is None  # given back: not an attempt
    assert tally(write_of(Outcome.unstarted("late")), False).counted is Counted.CLAIM_LOST
    suppressed = tally(write_of(Outcome.suppressed("x")), True)
    assert (suppressed.counted, suppressed.suppressed) == (Counted.FAILED, True)
    assert tally(write_of(Outcome.suppressed("x")), False).suppressed is False  # not applied: nothing failed
    assert tally(write_of(Outcome.sent("q")), True).send_seconds == 2.0
    assert tally(write_of(Outcome.ambiguous("?"), rescue=True), True).send_seconds is None
