"""decide(row, outcome, now, policy, jitter): every branch, with pinned time."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from outbox_mailer.decide import RetryPolicy, backoff_seconds, decide
from outbox_mailer.delivery import Delivery, Outcome, RefusedRecipient, Status

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
POLICY = RetryPolicy(base_seconds=10, max_seconds=600, default_max_attempts=5, in_doubt="resend")


def row(**kw: object) -> Delivery:
    base = Delivery(
        id=1, dedupe_key="k", claim_token=uuid.uuid4(), attempts=1, max_attempts=None, from_address=None,
        to_addresses=("a@example.com",), cc_addresses=(), bcc_addresses=(), reply_to=None, subject="s",
        text_body="b", html_body=None, headers={}, attachments=[], metadata={}, transport=None, priority=0,
        scheduled_at=NOW, expires_at=None, created_at=NOW,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def test_sent_records_time_and_provider_id() -> None:
    t = decide(row(), Outcome.sent("q-1", reply_code=250), NOW, POLICY, 0.5)
    assert (t.status, t.sent_at, t.provider_message_id, t.last_error) == (Status.SENT, NOW, "q-1", None)


def test_sent_with_refused_recipients_keeps_them_in_last_error() -> None:
    refused = (RefusedRecipient("b@example.com", 550, "5.1.1 no such user"),)
    t = decide(row(), Outcome.sent(refused=refused), NOW, POLICY, 0.5)
    assert t.status is Status.SENT
    assert t.last_error is not None and "b@example.com" in t.last_error and "550" in t.last_error


def test_permanent_fails_at_once() -> None:
    t = decide(row(attempts=1), Outcome.permanent("RCPT: 550 5.1.1 no such user"), NOW, POLICY, 0.5)
    assert t.status is Status.FAILED and "550" in (t.last_error or "")


def test_transient_retries_with_full_jitter_backoff() -> None:
    t = decide(row(attempts=3), Outcome.transient("451 try later"), NOW, POLICY, 0.5)
    # attempt 3: ceiling base * 2**2 = 40 s; jitter 0.5 -> 20 s
    assert t.status is Status.PENDING and t.scheduled_at == NOW + timedelta(seconds=20)
    assert t.last_error == "451 try later"


def test_backoff_is_capped() -> None:
    assert backoff_seconds(30, POLICY, 1.0) == 600
    assert backoff_seconds(10_000, POLICY, 1.0) == 600
    assert backoff_seconds(1, POLICY, 0.0) == 0


def test_backoff_rejects_jitter_out_of_range() -> None:
    with pytest.raises(ValueError):
        backoff_seconds(1, POLICY, 1.5)


def test_retry_after_is_honoured_when_longer_than_backoff() -> None:
    t = decide(row(attempts=1), Outcome.transient("429", retry_after_seconds=120), NOW, POLICY, 0.1)
    assert t.scheduled_at == NOW + timedelta(seconds=120)


def test_retry_after_shorter_than_backoff_keeps_backoff() -> None:
    t = decide(row(attempts=4), Outcome.transient("x", retry_after_seconds=1), NOW, POLICY, 1.0)
    assert t.scheduled_at == NOW + timedelta(seconds=80)


def test_transient_fails_when_attempts_exhausted() -> None:
    t = decide(row(attempts=5), Outcome.transient("451 later"), NOW, POLICY, 0.5)
    assert t.status is Status.FAILED and t.last_error is not None and "gave up after 5 attempts" in t.last_error


def test_row_max_attempts_overrides_default() -> None:
    assert decide(row(attempts=2, max_attempts=2), Outcome.transient("x"), NOW, POLICY, 0.5).status is Status.FAILED
    assert decide(row(attempts=5, max_attempts=9), Outcome.transient("x"), NOW, POLICY, 0.5).status is Status.PENDING


def test_uncharged_attempt_is_refunded_and_never_exhausts() -> None:
    t = decide(row(attempts=5), Outcome.unreachable("server unreachable"), NOW, POLICY, 0.5)
    assert t.status is Status.PENDING and t.refund_attempt


def test_retry_after_expiry_fails_as_expired() -> None:
    t = decide(row(attempts=1, expires_at=NOW + timedelta(seconds=5)), Outcome.transient("451"), NOW, POLICY, 1.0)
    assert t.status is Status.FAILED and (t.last_error or "").startswith("expired")


def test_retry_before_expiry_is_scheduled() -> None:
    t = decide(row(attempts=1, expires_at=NOW + timedelta(hours=1)), Outcome.transient("451"), NOW, POLICY, 1.0)
    assert t.status is Status.PENDING


def test_ambiguous_with_resend_retries() -> None:
    t = decide(row(attempts=1), Outcome.ambiguous("timeout after DATA"), NOW, POLICY, 0.0)
    assert t.status is Status.PENDING and t.scheduled_at == NOW


def test_ambiguous_with_hold_goes_in_doubt() -> None:
    hold = replace(POLICY, in_doubt="hold")
    t = decide(row(attempts=1), Outcome.ambiguous("timeout after DATA"), NOW, hold, 0.5)
    assert t.status is Status.IN_DOUBT and "outcome unknown" in (t.last_error or "")


def test_ambiguous_with_attempts_exhausted_is_in_doubt_not_failed() -> None:
    t = decide(row(attempts=5), Outcome.ambiguous("disconnect after DATA"), NOW, POLICY, 0.5)
    assert t.status is Status.IN_DOUBT


def test_long_errors_are_clipped() -> None:
    t = decide(row(), Outcome.permanent("x" * 5000), NOW, POLICY, 0.5)
    assert t.last_error is not None and len(t.last_error) == 2000


def test_ambiguous_inside_the_idempotency_window_is_resent_even_with_hold() -> None:
    hold = replace(POLICY, in_doubt="hold")
    outcome = Outcome.ambiguous("HTTP 502 after the request was sent", resend_safe_until=NOW + timedelta(hours=23))
    t = decide(row(attempts=1), outcome, NOW, hold, 0.5)
    assert t.status is Status.PENDING


def test_ambiguous_retry_past_the_idempotency_window_follows_the_policy() -> None:
    outcome = Outcome.ambiguous("timeout", resend_safe_until=NOW + timedelta(seconds=1))
    held = decide(row(attempts=3), outcome, NOW, replace(POLICY, in_doubt="hold"), 1.0)
    assert held.status is Status.IN_DOUBT and "idempotency window" in (held.last_error or "")
    resent = decide(row(attempts=3), outcome, NOW, POLICY, 1.0)
    assert resent.status is Status.PENDING


def test_a_claim_given_back_untried_is_pending_as_it_was_and_never_charged() -> None:
    t = decide(row(attempts=5, retry_recipients=("a@example.com",)),
               Outcome.unstarted("waited too long after the claim to start a send safely"), NOW, POLICY, 0.5)
    assert (t.status, t.scheduled_at, t.last_error) == (Status.PENDING, None, None), \
        "due as before (no backoff), its last error kept by the write, even on its last attempt"
    assert t.given_back and t.refund_attempt
    assert t.retry_recipients == ("a@example.com",), "the recipients still to reach are kept"
