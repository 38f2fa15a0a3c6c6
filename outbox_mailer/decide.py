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
* unstarted                -> ``pending`` as it was (its schedule, its ``last_error``),
                              the attempt refunded and no attempt written: the
                              claim went back untried
* ambiguous, policy hold   -> ``in_doubt``  (an operator decides), except when the
                              transport's idempotency key makes a resend safe
                              (``resend_safe_until``): then like transient, while
                              the retry falls inside that window

Partial deliveries (some recipients accepted the message, others did not):

* sent, every refusal permanent (5xx) -> ``sent``; the refused addresses are
  kept in ``refused_recipients``
* sent, some refusals temporary (4xx, a follow-up transaction that broke, or
  one whose outcome is unknown) -> ``pending`` at now + backoff with
  ``retry_recipients`` = those addresses: the next attempt sends to them only,
  with the same Message-ID; ``in_doubt`` instead when an outcome is unknown and
  the policy is hold
* a row whose earlier attempt reached some recipients (``retry_recipients`` is
  set) never ends ``failed``: when its remaining recipients are given up
  (permanent refusal, attempts used up, expiry) it ends ``sent``, with them in
  ``refused_recipients``. ``sent`` with no ``refused_recipients``: every
  recipient got it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Literal

from .delivery import Cause, Delivery, Outcome, OutcomeKind, RefusedRecipient, Status, quick_init

MAX_ERROR_CHARS = 2000
LATEST = datetime(9998, 12, 31, tzinfo=UTC)  # the schema refuses scheduled_at from 9999 on


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    base_seconds: float = 30.0
    max_seconds: float = 3600.0
    default_max_attempts: int = 8
    in_doubt: Literal["resend", "hold"] = "resend"


@quick_init
@dataclass(frozen=True, slots=True)
class Transition:
    status: Status
    scheduled_at: datetime | None = None  # set for a retry
    last_error: str | None = None
    sent_at: datetime | None = None
    provider_message_id: str | None = None
    refund_attempt: bool = False  # the attempt is not counted (outage, not the message's fault)
    retry_recipients: tuple[str, ...] | None = None  # the next attempt sends to these only (None: all)
    refused_recipients: tuple[str, ...] = ()  # newly given up: these will not get the email
    given_back: bool = False  # the claim went back untried: no attempt is written, the row is as it was
    cause: Cause | None = None  # of a row failed at once by its outcome (permanent, unsendable, suppressed)


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
    if outcome.cause is Cause.UNSTARTED:
        return Transition(Status.PENDING, refund_attempt=True, retry_recipients=delivery.retry_recipients,
                          given_back=True)
    if outcome.kind is OutcomeKind.SENT:
        if not outcome.refused:  # most sends: every recipient took it
            return Transition(Status.SENT, sent_at=now, provider_message_id=outcome.provider_message_id)
        retry = tuple(r.address for r in outcome.refused if not r.permanent)
        if retry:
            return _partly_sent(delivery, outcome, retry, now, policy, jitter)
        return Transition(
            Status.SENT,
            sent_at=now,
            provider_message_id=outcome.provider_message_id,
            last_error=_refused_summary(outcome),
            refused_recipients=_refused_for_good(outcome),
        )
    error = _clip(outcome.error or outcome.kind.value)
    if outcome.kind is OutcomeKind.PERMANENT:
        if delivery.retry_recipients is not None:
            return _rest_given_up(delivery, outcome, now, error)
        return Transition(Status.FAILED, last_error=error, refund_attempt=not outcome.charge_attempt,
                          cause=outcome.cause)
    held = policy.in_doubt == "hold" and outcome.resend_safe_until is None
    if outcome.kind is OutcomeKind.AMBIGUOUS and held:
        return _held(delivery, error)
    transition = _retry_or_give_up(delivery, outcome, error, now, policy, jitter, delivery.retry_recipients)
    if (
        outcome.kind is OutcomeKind.AMBIGUOUS
        and outcome.resend_safe_until is not None
        and transition.scheduled_at is not None
        and transition.scheduled_at > outcome.resend_safe_until
        and policy.in_doubt == "hold"
    ):
        return _held(delivery, f"{error} (the retry would fall after the provider's idempotency window)")
    return transition


def _partly_sent(
    delivery: Delivery, outcome: Outcome, retry: tuple[str, ...], now: datetime, policy: RetryPolicy, jitter: float
) -> Transition:
    """Some recipients accepted it, others may later: retry those, and only those."""
    summary = _refusals(outcome.refused)
    refused_for_good = _refused_for_good(outcome)
    if any(r.unknown for r in outcome.refused) and policy.in_doubt == "hold" and outcome.resend_safe_until is None:
        return Transition(
            Status.IN_DOUBT,
            last_error=_clip(f"outcome unknown for some recipients: {summary}"),
            provider_message_id=outcome.provider_message_id, retry_recipients=retry,
            refused_recipients=refused_for_good,
        )
    transition = _retry_or_give_up(delivery, outcome, f"sent to some recipients; {summary}", now, policy, jitter,
                                   retry)
    if transition.status is Status.PENDING:
        return replace(transition, provider_message_id=outcome.provider_message_id,
                       refused_recipients=refused_for_good)
    return replace(transition, provider_message_id=outcome.provider_message_id,
                   refused_recipients=refused_for_good + transition.refused_recipients)


def _held(delivery: Delivery, error: str) -> Transition:
    return Transition(Status.IN_DOUBT,
                      last_error=_clip(f"outcome unknown: {error}"), retry_recipients=delivery.retry_recipients)


def _rest_given_up(delivery: Delivery, outcome: Outcome, now: datetime, error: str,
                   remaining: tuple[str, ...] | None = None) -> Transition:
    """An earlier attempt reached some recipients: the row ends sent, without the remaining ones."""
    rest = remaining if remaining is not None else delivery.retry_recipients or ()
    return Transition(
        Status.SENT, sent_at=now,
        last_error=_clip(f"not delivered to {len(rest)} recipient(s): {error}"),
        provider_message_id=outcome.provider_message_id, refused_recipients=tuple(rest),
        refund_attempt=not outcome.charge_attempt,
    )


def _retry_or_give_up(
    delivery: Delivery, outcome: Outcome, error: str, now: datetime, policy: RetryPolicy, jitter: float,
    retry_recipients: tuple[str, ...] | None,
) -> Transition:
    """Retry later (the next attempt sending to ``retry_recipients``), or give up.

    Giving up fails the row, unless some recipients already have the message
    (``retry_recipients`` set): then it ends sent without the others.
    """
    refund = not outcome.charge_attempt
    charged = delivery.attempts - (1 if refund else 0)
    limit = max_attempts_of(delivery, policy)
    if charged >= limit and outcome.kind is OutcomeKind.AMBIGUOUS:
        return Transition(
            Status.IN_DOUBT,
            last_error=_clip(f"outcome unknown after {charged} attempts: {error}"),
            retry_recipients=retry_recipients,
        )
    if charged >= limit:
        if retry_recipients is not None:
            return _rest_given_up(delivery, outcome, now, f"gave up after {charged} attempts: {error}",
                                  retry_recipients)
        return Transition(
            Status.FAILED, last_error=_clip(f"gave up after {charged} attempts: {error}")
        )
    delay = backoff_seconds(charged if charged > 0 else 1, policy, jitter)
    if outcome.retry_after_seconds is not None:
        delay = max(delay, outcome.retry_after_seconds)
    retry_at = _plus(now, delay)
    if delivery.expires_at is not None and retry_at > delivery.expires_at:
        message = f"expired: next attempt would be after expires_at; last error: {error}"
        if retry_recipients is not None:
            return _rest_given_up(delivery, outcome, now, message, retry_recipients)
        return Transition(Status.FAILED, last_error=_clip(message),
                          refund_attempt=refund)
    return Transition(
        Status.PENDING,
        scheduled_at=retry_at,
        last_error=_clip(error),
        refund_attempt=refund,
        retry_recipients=retry_recipients,
    )


def _plus(now: datetime, seconds: float) -> datetime:
    """``now`` + ``seconds``, saturating at the latest time the schema accepts (no OverflowError)."""
    try:
        return min(now + timedelta(seconds=seconds), LATEST)
    except OverflowError:
        return LATEST


def _refused_for_good(outcome: Outcome) -> tuple[str, ...]:
    return tuple(r.address for r in outcome.refused if r.permanent)


def _refusals(refused: tuple[RefusedRecipient, ...]) -> str:
    parts = [f"{r.address}: {'outcome unknown, ' if r.unknown else ''}{r.reply_code or ''} {r.message}".strip()
             for r in refused]
    return "refused recipients: " + "; ".join(parts)


def _refused_summary(outcome: Outcome) -> str | None:
    if not outcome.refused:
        return None
    return _clip("sent; " + _refusals(outcome.refused))


def _clip(text: str) -> str:
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"
