"""An outcome says its cause; what is recorded and whether the attempt counts follow from it."""

from __future__ import annotations

import pytest

from outbox_mailer.delivery import Cause, Outcome, OutcomeKind

EXPECTED = {
    # cause: (constructor call, recorded kind, charged)
    Cause.SENT: (lambda: Outcome.sent("q"), OutcomeKind.SENT, True),
    Cause.TRANSIENT: (lambda: Outcome.transient("451"), OutcomeKind.TRANSIENT, True),
    Cause.PERMANENT: (lambda: Outcome.permanent("550"), OutcomeKind.PERMANENT, True),
    Cause.AMBIGUOUS: (lambda: Outcome.ambiguous("lost after DATA"), OutcomeKind.AMBIGUOUS, True),
    Cause.UNREACHABLE: (lambda: Outcome.unreachable("connection refused"), OutcomeKind.TRANSIENT, False),
    Cause.PAUSED: (lambda: Outcome.paused("credentials refused", 300), OutcomeKind.TRANSIENT, False),
    Cause.HELD_BACK: (lambda: Outcome.held_back("transport paused"), OutcomeKind.TRANSIENT, False),
    Cause.UNSENDABLE: (lambda: Outcome.unsendable("cannot compose"), OutcomeKind.PERMANENT, False),
    Cause.SUPPRESSED: (lambda: Outcome.suppressed("suppressed: a@example.com"), OutcomeKind.PERMANENT, False),
    Cause.UNSTARTED: (lambda: Outcome.unstarted("claim too old to start"), OutcomeKind.TRANSIENT, False),
}


def test_every_cause_has_a_constructor_and_an_expectation() -> None:
    assert set(EXPECTED) == set(Cause)


@pytest.mark.parametrize("cause", list(Cause))
def test_kind_and_charge_follow_from_the_cause(cause: Cause) -> None:
    make, kind, charged = EXPECTED[cause]
    outcome = make()
    assert (outcome.cause, outcome.kind, outcome.charge_attempt) == (cause, kind, charged)


def test_only_a_pause_carries_a_pause_length() -> None:
    assert Outcome.paused("quota", 60).pause_seconds == 60
    assert all(EXPECTED[c][0]().pause_seconds is None for c in Cause if c is not Cause.PAUSED)
