"""What one recorded write counts as (:func:`tally`), read once from its typed fields only (its status,
its fence, its outcome's cause, its attempt's rescue flag): the recorder's progress line, each email's
log line (``email_log.py``) and the metrics (``metrics.py``) count from it."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..delivery import Cause, OutcomeKind, Status, quick_init
from ..store import OutcomeWrite


class Counted(enum.StrEnum):
    """What one recorded write counts as."""

    SENT = "sent"
    FAILED = "failed"
    RETRIED = "retried"  # back to pending, to be tried again
    IN_DOUBT = "in_doubt"
    CLAIM_LOST = "claim_lost"  # not applied: the row's claim had changed


COUNTED = {Status.SENT: Counted.SENT, Status.FAILED: Counted.FAILED, Status.PENDING: Counted.RETRIED,
           Status.IN_DOUBT: Counted.IN_DOUBT}


@quick_init
@dataclass(frozen=True, slots=True)
class Tally:
    """What one write counts as, read from its typed fields."""

    counted: Counted | None  # None: a claim given back untried (not an attempt)
    ambiguous: bool  # an applied attempt whose outcome is unknown
    suppressed: bool  # the row failed unsent: every recipient is suppressed
    send_seconds: float | None  # the attempt's length (None: no send was timed: given back, or a rescue)


def tally(write: OutcomeWrite, applied: bool) -> Tally:
    """What ``write`` counts as, ``applied`` or refused by the fence."""
    transition, attempt = write.transition, write.attempt
    if transition.given_back:
        return Tally(None if applied else Counted.CLAIM_LOST, False, False, None)
    # a rescue's times are the dead claim's, not a send's
    seconds = None if attempt.rescue else max(0.0, (attempt.finished_at - attempt.started_at).total_seconds())
    if not applied:
        return Tally(Counted.CLAIM_LOST, False, False, seconds)
    return Tally(COUNTED.get(transition.status), attempt.outcome == OutcomeKind.AMBIGUOUS,
                 transition.status is Status.FAILED and transition.cause is Cause.SUPPRESSED, seconds)
