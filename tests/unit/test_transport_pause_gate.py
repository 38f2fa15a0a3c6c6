"""An operator's pause as a transport's gate reads it (gate.py, pauses.py): part of the one paused answer, so
failover routes around it; a resume closes the circuit breaker only when its pause was published before."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from outbox_mailer.daemon.breaker import Breaker
from outbox_mailer.daemon.failover import Routes
from outbox_mailer.daemon.gate import OPERATOR_RECHECK_SECONDS, TransportGate
from outbox_mailer.daemon.pauses import PauseWatch
from outbox_mailer.delivery import Outcome
from outbox_mailer.store.pauses import PauseState

pytestmark = pytest.mark.anyio
NOW = 1000.0
T0 = datetime(2030, 1, 1, tzinfo=UTC)


def paused(name: str, seconds_left: float | None = None) -> PauseState:
    return PauseState(name, True, seconds_left, "olga", "relay maintenance", None)


def open_state(name: str, resumed_at: datetime | None = None) -> PauseState:
    return PauseState(name, False, None, None, None, resumed_at)


def test_an_operators_pause_until_resumed_pauses_the_gate_and_holds_a_send_back_only_briefly() -> None:
    gate = TransportGate("smtp", Breaker(1.0, 30.0))
    gate.read_pause(paused("smtp"), NOW)
    assert gate.is_paused(NOW + 86_400)
    assert gate.paused_for(NOW) == OPERATOR_RECHECK_SECONDS, "a resume may come at any time"
    gate.read_pause(open_state("smtp"), NOW + 5)
    assert not gate.is_paused(NOW + 5)


def test_an_operators_pause_for_a_while_ends_by_itself() -> None:
    gate = TransportGate("smtp", Breaker(1.0, 30.0))
    gate.read_pause(paused("smtp", seconds_left=60), NOW)
    assert gate.is_paused(NOW + 59) and not gate.is_paused(NOW + 61)


def test_rows_of_a_transport_an_operator_paused_go_to_its_open_fallback() -> None:
    gates = {n: TransportGate(n, Breaker(1.0, 30.0)) for n in ("resend", "ses")}
    routes = Routes({"resend": "ses"}, {"resend": 60.0, "ses": 60.0}, gates)
    gates["resend"].read_pause(paused("resend"), NOW)
    assert routes.route("resend", NOW) == "ses" and routes.paused(NOW) == []
    gates["ses"].read_pause(paused("ses"), NOW)
    assert routes.paused(NOW) == ["resend", "ses"], "nothing can carry them: not claimed"


def test_a_resume_closes_the_breaker_only_when_its_pause_was_published_before_it() -> None:
    gate = TransportGate("smtp", Breaker(300.0, 300.0))
    gate.observe(Outcome.unreachable("connection refused"))
    now = gate.breaker.paused_until - 300
    assert gate.opened is not None and gate.breaker.is_paused(now)
    gate.published_at = T0
    gate.read_pause(open_state("smtp", resumed_at=T0 - timedelta(seconds=1)), now)
    assert gate.breaker.is_paused(now), "a resume older than this pause"
    gate.read_pause(open_state("smtp", resumed_at=T0 + timedelta(seconds=1)), now)
    assert not gate.breaker.is_paused(now)


class Board:
    """The database's side, kept in memory: what was published, and the states to read."""

    def __init__(self, states: list[PauseState]) -> None:
        self.states = states
        self.published: list[tuple[str, str, str, float]] = []

    async def pauses(self, transports: list[str]) -> list[PauseState]:
        return [s for s in self.states if s.transport in transports]

    async def publish_breaker_pause(self, transport: str, paused_by: str, reason: str, seconds: float) -> datetime:
        self.published.append((transport, paused_by, reason, seconds))
        return T0


async def test_a_breaker_pause_is_published_once_per_opening_and_the_operators_pause_is_read() -> None:
    gates = {n: TransportGate(n, Breaker(30.0, 30.0)) for n in ("smtp", "resend")}
    board = Board([open_state("smtp"), paused("resend")])
    clock = [NOW]
    watch = PauseWatch(gates, board, "host:1", clock=lambda: clock[0])
    gates["smtp"].observe(Outcome.unreachable("connection refused"))
    clock[0] = gates["smtp"].breaker.paused_until - 29.5
    await watch.turn()
    await watch.turn()
    [(transport, by, reason, seconds)] = board.published
    assert (transport, by, reason) == ("smtp", "breaker:host:1", "unreachable: connection refused")
    assert seconds == pytest.approx(29.5)
    assert gates["smtp"].published_at == T0 and gates["resend"].is_paused(clock[0] + 3600)
