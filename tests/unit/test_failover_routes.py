"""Which transport carries a row, and which outcomes move it to a fallback (failover.py)."""

from __future__ import annotations

import pytest

from outbox_mailer.daemon.breaker import Breaker
from outbox_mailer.daemon.failover import Routes
from outbox_mailer.daemon.gate import TransportGate
from outbox_mailer.delivery import Outcome, RefusedRecipient
from outbox_mailer.settings.config import Settings

NOW = 1000.0


def routes(fallbacks: dict[str, str], paused: tuple[str, ...] = (), wait: float = 60.0) -> Routes:
    names = {"smtp", "resend", "postmark", "ses", *fallbacks, *fallbacks.values()}
    gates = {n: TransportGate(n, Breaker(1.0, 30.0), None) for n in names}
    for name in paused:
        gates[name].breaker.pause(NOW, 60)
    return Routes(fallbacks, {n: wait for n in names}, gates)


def moves_on(r: Routes, own: str, pinned: str | None, name: str, outcome: Outcome) -> bool:
    """Due again at once after ``outcome`` on ``name``: the claim would now send the row elsewhere."""
    return r.moved_to(r.attempt(own, pinned, name), outcome, NOW) is not None


def test_a_row_goes_to_its_own_transport_while_it_is_open() -> None:
    assert routes({"resend": "ses"}).route("resend", NOW) == "resend"


def test_while_its_transport_is_paused_a_row_goes_to_the_first_open_one_of_the_chain() -> None:
    r = routes({"resend": "postmark", "postmark": "ses"}, paused=("resend", "postmark"))
    assert r.route("resend", NOW) == "ses" and r.route("postmark", NOW) == "ses"
    assert not r.paused_everywhere("resend", NOW)


def test_with_every_transport_of_the_chain_paused_nothing_is_claimed() -> None:
    r = routes({"resend": "ses"}, paused=("resend", "ses"))
    assert r.route("resend", NOW) == "resend" and r.paused_everywhere("resend", NOW)
    assert routes({}, paused=("smtp",)).paused_everywhere("smtp", NOW)


@pytest.mark.parametrize("outcome", [
    Outcome.unreachable("connection refused"),
    Outcome.paused("401 invalid API key", 60),
    Outcome.transient("429 slow down", reply_code=429, retry_after_seconds=120),
])
def test_outcomes_that_prove_the_message_was_not_taken_fail_over(outcome: Outcome) -> None:
    assert routes({"resend": "ses"}).proves_not_taken("resend", outcome)


@pytest.mark.parametrize("outcome", [
    Outcome.ambiguous("timeout after DATA"),  # may have gone out: the in-doubt policy decides
    Outcome.permanent("550 5.1.1 no such user", reply_code=550, enhanced_code="5.1.1"),  # a bad address stays bad
    Outcome.transient("451 try later", reply_code=451),
    Outcome.transient("429 slow down", reply_code=429, retry_after_seconds=30),  # within FAILOVER_AFTER_SECONDS
    Outcome.transient("some refused", refused=(RefusedRecipient("a@example.com", 450, "later"),)),
    Outcome.held_back("waited too long after the claim to start a send safely"),  # the claim's age, not the transport
    Outcome.held_back("transport paused"),  # the claim routes it: nothing to do at the send
    Outcome.sent("id-1"),
    Outcome.unsendable("cannot compose"),
])
def test_other_outcomes_never_fail_over(outcome: Outcome) -> None:
    assert not routes({"resend": "ses"}).proves_not_taken("resend", outcome)


def test_a_paused_fallback_is_skipped_and_without_an_open_one_nothing_fails_over() -> None:
    unreachable = Outcome.unreachable("x")  # the breaker paused resend on this outcome
    r = routes({"resend": "postmark", "postmark": "ses"}, paused=("resend", "postmark"))
    assert moves_on(r, "resend", None, "resend", unreachable)  # on to ses
    assert not moves_on(routes({"resend": "ses"}, paused=("resend", "ses")), "resend", None, "resend", unreachable)
    assert not moves_on(routes({}, paused=("resend",)), "resend", None, "resend", unreachable)


def test_a_transport_held_off_by_a_429_longer_than_failover_after_seconds_routes_to_its_fallback() -> None:
    r = routes({"resend": "ses"}, wait=30.0)
    r.gates["resend"].held_off_until = NOW + 20
    assert r.route("resend", NOW) == "resend"
    r.gates["resend"].held_off_until = NOW + 120
    assert r.route("resend", NOW) == "ses" and not r.paused_everywhere("resend", NOW)
    alone = routes({}, wait=30.0)
    alone.gates["resend"].held_off_until = NOW + 120
    assert not alone.paused_everywhere("resend", NOW), "with no fallback its rows still wait at its gate"


def test_routes_come_from_the_settings() -> None:
    settings = Settings(database_url="postgresql://u@127.0.0.1:1/db", smtp={"fallback": "resend"},
                        transports={"resend": {"kind": "resend", "api_key": "k", "failover_after_seconds": 5}})
    r = Routes.of(settings, {})
    assert dict(r.fallbacks) == {"smtp": "resend"} and r.waits["resend"] == 5 and r.waits["smtp"] == 60


@pytest.mark.parametrize(("kw", "message"), [
    ({"smtp": {"fallback": "nope"}}, "OUTBOX_MAILER_SMTP__FALLBACK: unknown transport 'nope'"),
    ({"smtp": {"fallback": "smtp"}}, "OUTBOX_MAILER_SMTP__FALLBACK: the fallbacks loop: smtp -> smtp"),
    ({"smtp": {"fallback": "resend"}, "transports": {"resend": {"kind": "resend", "api_key": "k", "fallback": "smtp"}}},
     "the fallbacks loop: smtp -> resend -> smtp"),
    ({"transports": {"resend": {"kind": "resend", "api_key": "k", "failover_after_seconds": 0}}}, "greater than 0"),
])
def test_bad_fallbacks_are_refused(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as exc:
        Settings(database_url="postgresql://u@127.0.0.1:1/db", **kw)
    assert message in str(exc.value)


def test_a_pinned_row_goes_to_its_pin_even_while_it_is_paused_unless_that_is_gone() -> None:
    r = routes({"resend": "ses"}, paused=("resend",))
    assert r.carrier("resend", "resend", NOW) == "resend"
    assert r.carrier("resend", None, NOW) == "ses"
    assert r.carrier("resend", "removed-since", NOW) == "ses"


def test_a_row_is_due_at_once_only_when_the_claim_would_now_send_it_elsewhere() -> None:
    unreachable = Outcome.unreachable("connection refused")
    r = routes({"smtp": "resend"}, paused=("smtp",))  # the breaker paused smtp on this outcome
    assert moves_on(r, "smtp", None, "smtp", unreachable)
    assert moves_on(r, "smtp", None, "smtp", Outcome.held_back("transport paused"))
    assert not moves_on(r, "smtp", "smtp", "smtp", unreachable), "pinned: it waits for its transport"
    assert not moves_on(r, "smtp", None, "smtp", Outcome.ambiguous("no reply"))
    # a long 429 from a transport without a fallback, or one not held off, is retried as usual
    throttled = Outcome.transient("429", reply_code=429, retry_after_seconds=120)
    assert not moves_on(routes({}), "resend", None, "resend", throttled)
    assert not moves_on(routes({"resend": "ses"}), "resend", None, "resend", throttled)
    held = routes({"resend": "ses"})
    held.gates["resend"].held_off_until = NOW + 120
    assert moves_on(held, "resend", None, "resend", throttled)
