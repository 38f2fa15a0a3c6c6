"""Pure decisions: what happens to a row after an attempt.

``decide(delivery, outcome, now, policy, jitter)`` is the one place where an
outcome becomes a transition. It reads no clock and draws no random number:
``now`` and ``jitter`` (a float in [0, 1)) are parameters, so every branch is
tested with pinned values. The store only applies what is decided here.

Transitions out of ``sending``:

* sent                     -> ``sent``      (the server accepted it)
* permanent                -> ``failed``    (it will never be accepted as is)
* transient                -> ``pending``   at now + backoff, or ``failed`` when the
                                            attempts are used up or the retry would
                                            fall after ``expires_at``
* ambiguous, policy resend -> like transient (same Message-ID next time), but
                              ``in_doubt`` rather than ``failed`` once attempts are used up
* ambiguous, policy hold   -> ``in_doubt``  (an operator decides), except when the
                              transport's idempotency key makes a resend safe
                              (``resend_safe_until``): then like transient, while
                              the retry falls inside that window
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from .delivery import Delivery, Outcome, OutcomeKind, Status

MAX_ERROR_CHARS = 2000


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    base_seconds: float = 30.0
    max_seconds: float = 3600.0
    default_max_attempts: int = 8
    in_doubt: Literal["resend", "hold"] = "resend"


@dataclass(frozen=True, slots=True)
class Transition:
    status: Status
    reason: str  # short, for the log line
    scheduled_at: datetime | None = None  # set for a retry
    last_error: str | None = None
    sent_at: datetime | None = None
    provider_message_id: str | None = None
    refund_attempt: bool = False  # the attempt is not counted (outage, not the message's fault)


def backoff_seconds(attempt: int, policy: RetryPolicy, jitter: float) -> float:
    """Full-jitter exponential backoff: uniform in [0, min(max, base * 2**(attempt-1))]."""
    if not 0.0 <= jitter <= 1.0:
        raise ValueError("jitter must be in [0, 1]")
    exponent = min(max(attempt - 1, 0), 62)  # avoid float overflow for absurd attempt counts
    ceiling = min(policy.max_seconds, policy.base_seconds * (2.0**exponent))
    return ceiling * jitter


def max_attempts_of(delivery: Delivery, policy: RetryPolicy) -> int:
    return delivery.max_attempts if delivery.max_attempts is not None else policy.default_max_attempts


def decide(delivery: Delivery, outcome: Outcome, now: datetime, policy: RetryPolicy, jitter: float) -> Transition:
    """Turn one attempt's outcome into the row's next state."""
    refund = not outcome.charge_attempt
    if outcome.kind is OutcomeKind.SENT:
        return Transition(
            Status.SENT,
            "sent",
            sent_at=now,
            provider_message_id=outcome.provider_message_id,
            last_error=_refused_summary(outcome),
        )
    error = _clip(outcome.error or outcome.kind.value)
    if outcome.kind is OutcomeKind.PERMANENT:
        return Transition(Status.FAILED, "permanent failure", last_error=error, refund_attempt=refund)
    if outcome.kind is OutcomeKind.AMBIGUOUS and policy.in_doubt == "hold" and outcome.resend_safe_until is None:
        return _held(error)
    transition = _retry_or_fail(delivery, outcome, error, now, policy, jitter, refund)
    if (
        outcome.kind is OutcomeKind.AMBIGUOUS
        and outcome.resend_safe_until is not None
        and transition.scheduled_at is not None
        and transition.scheduled_at > outcome.resend_safe_until
        and policy.in_doubt == "hold"
    ):
        return _held(f"{error} (the retry would fall after the provider's idempotency window)")
    return transition


def _held(error: str) -> Transition:
    return Transition(Status.IN_DOUBT, "outcome unknown, held for an operator", last_error=_clip(f"outcome unknown: {error}"))


def _retry_or_fail(
    delivery: Delivery, outcome: Outcome, error: str, now: datetime, policy: RetryPolicy, jitter: float, refund: bool
) -> Transition:
    charged = delivery.attempts - (1 if refund else 0)
    limit = max_attempts_of(delivery, policy)
    if charged >= limit and outcome.kind is OutcomeKind.AMBIGUOUS:
        return Transition(
            Status.IN_DOUBT,
            "outcome unknown and attempts exhausted",
            last_error=_clip(f"outcome unknown after {charged} attempts: {error}"),
        )
    if charged >= limit:
        return Transition(
            Status.FAILED, "attempts exhausted", last_error=_clip(f"gave up after {charged} attempts: {error}")
        )
    delay = backoff_seconds(charged if charged > 0 else 1, policy, jitter)
    if outcome.retry_after_seconds is not None:
        delay = max(delay, outcome.retry_after_seconds)
    retry_at = now + timedelta(seconds=delay)
    if delivery.expires_at is not None and retry_at > delivery.expires_at:
        return Transition(
            Status.FAILED,
            "expires before the next attempt",
            last_error=_clip(f"expired: next attempt would be after expires_at; last error: {error}"),
            refund_attempt=refund,
        )
    return Transition(
        Status.PENDING,
        "retry scheduled",
        scheduled_at=retry_at,
        last_error=error,
        refund_attempt=refund,
    )


def _refused_summary(outcome: Outcome) -> str | None:
    if not outcome.refused:
        return None
    parts = [f"{r.address}: {r.reply_code or ''} {r.message}".strip() for r in outcome.refused]
    return _clip("sent; refused recipients: " + "; ".join(parts))


def _clip(text: str) -> str:
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"
