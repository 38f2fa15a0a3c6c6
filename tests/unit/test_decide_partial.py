"""decide() for attempts that reached some recipients and not others (pinned time, no database)."""

from __future__ import annotations

from datetime import timedelta

from outbox_mailer.decide import RetryPolicy, decide
from outbox_mailer.delivery import Outcome, RefusedRecipient, Status
from tests.unit.test_decide import NOW, POLICY, row

HOLD = RetryPolicy(base_seconds=10, max_seconds=600, default_max_attempts=5, in_doubt="hold")
B_LATER = RefusedRecipient("b@example.com", 450, "4.2.1 mailbox busy")
C_NEVER = RefusedRecipient("c@example.com", 550, "5.1.1 no such user")
D_BROKEN = RefusedRecipient("d@example.com", None, "connection lost before DATA")
E_UNKNOWN = RefusedRecipient("e@example.com", None, "connection lost after the body", unknown=True)


def test_temporary_refusals_retry_only_those_recipients() -> None:
    t = decide(row(), Outcome.sent("q-1", refused=(B_LATER, C_NEVER, D_BROKEN)), NOW, POLICY, 0.5)
    assert t.status is Status.PENDING and t.scheduled_at is not None and t.scheduled_at > NOW
    assert t.retry_recipients == ("b@example.com", "d@example.com")
    assert t.refused_recipients == ("c@example.com",)
    assert t.provider_message_id == "q-1" and t.sent_at is None
    assert "b@example.com" in (t.last_error or "") and "450" in (t.last_error or "")


def test_only_permanent_refusals_end_sent_with_the_refused_kept() -> None:
    t = decide(row(), Outcome.sent("q-1", refused=(C_NEVER,)), NOW, POLICY, 0.5)
    assert (t.status, t.sent_at, t.retry_recipients, t.refused_recipients) == (
        Status.SENT, NOW, None, ("c@example.com",))


def test_sent_to_everyone_has_no_refused_recipients() -> None:
    t = decide(row(retry_recipients=("b@example.com",)), Outcome.sent("q-2"), NOW, POLICY, 0.5)
    assert (t.status, t.retry_recipients, t.refused_recipients, t.last_error) == (Status.SENT, None, (), None)


def test_partial_with_no_attempts_left_ends_sent_without_the_rest() -> None:
    t = decide(row(attempts=5), Outcome.sent("q-1", refused=(B_LATER, C_NEVER)), NOW, POLICY, 0.5)
    assert t.status is Status.SENT and t.sent_at == NOW
    assert set(t.refused_recipients) == {"b@example.com", "c@example.com"}
    assert t.last_error is not None and t.last_error.startswith("not delivered to 1 recipient(s)")


def test_a_transient_failure_of_the_rest_keeps_the_same_recipients_owed() -> None:
    owed = row(attempts=2, retry_recipients=("b@example.com",))
    t = decide(owed, Outcome.transient("MAIL: 421 closing"), NOW, POLICY, 0.5)
    assert t.status is Status.PENDING and t.retry_recipients == ("b@example.com",)


def test_a_row_that_reached_some_recipients_never_ends_failed() -> None:
    owed = row(attempts=5, retry_recipients=("b@example.com",))
    exhausted = decide(owed, Outcome.transient("MAIL: 421 closing"), NOW, POLICY, 0.5)
    refused = decide(row(attempts=2, retry_recipients=("b@example.com",)),
                     Outcome.permanent("DATA: 554 no"), NOW, POLICY, 0.5)
    expiring = decide(row(attempts=2, retry_recipients=("b@example.com",), expires_at=NOW + timedelta(seconds=1)),
                      Outcome.transient("RCPT: 450 busy"), NOW, POLICY, 0.99)
    for t in (exhausted, refused, expiring):
        assert t.status is Status.SENT and t.sent_at == NOW, t
        assert t.refused_recipients == ("b@example.com",)


def test_unknown_outcome_for_some_recipients_is_held_under_hold() -> None:
    t = decide(row(), Outcome.sent("q-1", refused=(E_UNKNOWN, B_LATER)), NOW, HOLD, 0.5)
    assert t.status is Status.IN_DOUBT
    assert t.retry_recipients == ("e@example.com", "b@example.com")
    assert "outcome unknown" in (t.last_error or "")


def test_unknown_outcome_for_some_recipients_is_retried_under_resend() -> None:
    t = decide(row(), Outcome.sent("q-1", refused=(E_UNKNOWN,)), NOW, POLICY, 0.5)
    assert t.status is Status.PENDING and t.retry_recipients == ("e@example.com",)


def test_held_partial_row_keeps_its_owed_recipients() -> None:
    t = decide(row(retry_recipients=("b@example.com",)), Outcome.ambiguous("DATA: timeout"), NOW, HOLD, 0.5)
    assert t.status is Status.IN_DOUBT and t.retry_recipients == ("b@example.com",)


def test_absurd_delays_saturate_instead_of_overflowing() -> None:
    policy = RetryPolicy(base_seconds=1e300, max_seconds=1e300, default_max_attempts=5)
    t = decide(row(), Outcome.transient("x", retry_after_seconds=1e300), NOW, policy, 0.99)
    assert t.status is Status.PENDING and t.scheduled_at is not None and t.scheduled_at.year == 9998
