"""A row failed because every recipient is suppressed is counted apart (and as failed)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from outbox_mailer.daemon.metrics import Metrics
from outbox_mailer.decide import RetryPolicy, decide
from outbox_mailer.delivery import Delivery, Outcome
from outbox_mailer.delivery_events.suppression import screen
from outbox_mailer.settings.config import Settings
from outbox_mailer.store import AttemptRecord, OutcomeWrite

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def write_of(outcome: Outcome) -> OutcomeWrite:
    d = Delivery(id=1, dedupe_key="k", claim_token=None, attempts=1, max_attempts=None, from_address=None,
                 to_addresses=("a@example.com",), cc_addresses=(), bcc_addresses=(), reply_to=None, subject="s",
                 text_body="b", html_body=None, headers={}, attachments=[], metadata={}, transport=None, priority=0,
                 scheduled_at=NOW, expires_at=None, created_at=NOW)
    t = decide(d, outcome, NOW, RetryPolicy(), 0.5)
    return OutcomeWrite(d, t, AttemptRecord(1, NOW, NOW, outcome.kind, None, None, outcome.error, "smtp", "w"))


def test_suppressed_rows_are_counted_apart_from_other_failures() -> None:
    metrics = Metrics(Settings(database_url="postgresql://u@127.0.0.1:1/db"))
    d = write_of(Outcome.sent("q")).delivery
    refusal = screen(dataclasses.replace(d, suppressed=("a@example.com hard_bounce 2026-11-30",))).refusal
    assert refusal is not None
    metrics.recorded(write_of(refusal), True)
    metrics.recorded(write_of(Outcome.unsendable("cannot compose: bad")), True)
    get = metrics.registry.get_sample_value
    assert get("outbox_mailer_emails_suppressed_total", {"transport": "smtp"}) == 1
    assert get("outbox_mailer_emails_failed_total", {"transport": "smtp"}) == 2
