"""Failover: which transport carries a row now, and when a row moves on to a fallback.

``OUTBOX_MAILER_SMTP__FALLBACK`` and ``OUTBOX_MAILER_TRANSPORTS__<NAME>__FALLBACK`` name the
transport that takes over (chains allowed; the settings refuse unknown names and loops). A row
moves on only when its transport **provably did not take the message**:

* the attempt found no server that could judge it (connection refused, DNS, TLS, AUTH: the cause
  ``unreachable``), or the far side refused our account (``paused``: credentials, relaying, a
  quota);
* a throttling answer (a 429) asked to wait longer than the transport's ``FAILOVER_AFTER_SECONDS``.

Such an attempt is recorded (a 429 is charged as an attempt, the others are not), and when the
claim would now route the row elsewhere it is due again at once, as is a row its lane held back
because its transport paused meanwhile. The claim routes (:meth:`Routes.route`): while a
transport is paused (by its circuit breaker, or by an operator: ``outbox-mailer pause``, which
fails over too, since it is meant to stop mail through that transport), or held off by a 429 for longer than
``FAILOVER_AFTER_SECONDS``, its rows go to the first open transport of its chain, through that
transport's own lane, rate limit and send timeout; once it reopens, rows use it again. While every
transport of a chain is paused its rows are not claimed.

Never after an ambiguous outcome: the body may have gone out, and the in-doubt policy decides. A
row with an attempt that ended so stays pinned to the transport of the latest such attempt (the
claim returns it as ``pinned_transport``), so that a resend reaches the provider that knows its
idempotency key. A claim sent anywhere but its pinned or own transport (:func:`presumed_carrier`)
records that transport first (:func:`record_carrier`; the row is held back when that fails), so
that a rescuer of a daemon that died during the send records the unknown outcome there. Never
after a refusal of the message or the recipient (a bad address stays bad). Never a row that names a provider's
own template (``provider_template``): only its own provider renders it (a Postmark alias means nothing to
SendGrid), so it is held to its own transport as a row is pinned (:func:`held_to`), and waits for it.
The fallback sends the same message: the same Message-ID, the same dedupe key as its idempotency key. Each attempt is
recorded with the transport that carried it; the row's ``transport`` column keeps what the
application asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ..delivery import Cause, Delivery, Outcome, quick_init
from ..errors import DatabaseError

if TYPE_CHECKING:
    from ..settings.config import Settings
    from .gate import TransportGate

__all__ = ["CarrierLedger", "Route", "Routes", "held_to", "presumed_carrier", "record_carrier"]

_NOT_TAKEN = frozenset({Cause.UNREACHABLE, Cause.PAUSED})


@quick_init
@dataclass(frozen=True, slots=True)
class Route:
    """Where one attempt goes, taken once at its start and passed along its path."""

    own: str  # the row's transport (its column, or the default)
    pinned: str | None  # the transport of its latest attempt whose outcome is unknown
    name: str  # the transport carrying this attempt
    gate: TransportGate  # name's

    @property
    def recorded_first(self) -> bool:
        """Not where a rescuer would presume the claim went (:func:`presumed_carrier`: a fallback, or
        the route of a row pinned to a transport no longer configured): recorded before the send."""
        return self.name != presumed_carrier(self.own, self.pinned)


@dataclass(frozen=True)
class Routes:
    fallbacks: Mapping[str, str]  # transport -> its fallback
    waits: Mapping[str, float]  # transport -> FAILOVER_AFTER_SECONDS
    gates: Mapping[str, TransportGate]

    @classmethod
    def of(cls, settings: Settings, gates: Mapping[str, TransportGate]) -> Routes:
        transports = settings.all_transports()
        return cls({n: t.fallback for n, t in transports.items() if t.fallback is not None},
                   {n: t.failover_after_seconds for n, t in transports.items()}, gates)

    def route(self, name: str, now: float) -> str:
        """``name``, or while it is closed the first transport of its fallback chain that is open
        (``name`` itself when every one is closed, or it has no gate: an unknown transport)."""
        current = name
        while not self._open(current, now):
            following = self.fallbacks.get(current)
            if following is None:
                return name
            current = following
        return current

    def carrier(self, own: str, pinned: str | None, now: float) -> str:
        """The transport for a row whose own is ``own``: ``pinned`` when set (the transport of its
        latest attempt whose outcome is unknown; one no longer configured is ignored), else :meth:`route`."""
        return pinned if pinned is not None and pinned in self.gates else self.route(own, now)

    def attempt(self, own: str, pinned: str | None, name: str) -> Route:
        """The route of an attempt through ``name`` (its gate must exist), taken once at its start."""
        return Route(own, pinned, name, self.gates[name])

    def moved_to(self, route: Route, outcome: Outcome, now: float) -> str | None:
        """After ``outcome`` on ``route`` (already observed by its gate): the open transport the claim
        now routes the row to, when the attempt proves the message was not taken (or it never started:
        held back) and that is another transport; None: the row waits as decided. The chain is walked
        once, and only after such an outcome."""
        held_back = outcome.cause is Cause.HELD_BACK
        if route.pinned is not None or not (held_back or self.proves_not_taken(route.name, outcome)):
            return None
        following = self.route(route.own, now)
        if following == route.name or not (held_back or self._open(following, now)):
            return None
        return following

    def paused(self, now: float) -> list[str]:
        """Transports whose rows nothing can carry now (:meth:`paused_everywhere`)."""
        return [name for name in self.gates if self.paused_everywhere(name, now)]

    def paused_everywhere(self, name: str, now: float) -> bool:
        """Nothing could carry a row of ``name`` now: do not claim it (a transport only held off by a
        429, with no open fallback, still takes its rows: they wait for it at its gate)."""
        gate = self.gates.get(self.route(name, now))
        return gate is not None and gate.is_paused(now)

    def _open(self, name: str, now: float) -> bool:
        gate = self.gates.get(name)
        if gate is None:
            return True
        return not gate.is_paused(now) and gate.held_off_seconds(now) <= self.waits.get(name, 0.0)

    def proves_not_taken(self, name: str, outcome: Outcome) -> bool:
        """``outcome`` on ``name`` proves the message was not taken there: a fallback may carry it."""
        if outcome.cause in _NOT_TAKEN:
            return True
        wait = outcome.retry_after_seconds
        return outcome.cause is Cause.TRANSIENT and outcome.reply_code == 429 and wait is not None \
            and wait > self.waits.get(name, 0.0)


class CarrierLedger(Protocol):
    """Where a claim's carrier is recorded before its send (the claim session, through DaemonSessions)."""

    async def record_carrier(self, delivery: Delivery, transport: str) -> bool:
        """Record that this claim goes through ``transport``; False when the claim was lost. Raises DatabaseError."""


def held_to(delivery: Delivery, own: str) -> str | None:
    """The transport a row whose own is ``own`` may not leave: where its latest attempt with an unknown outcome
    went, or its own when it names a provider's template; None: it may fail over."""
    if delivery.pinned_transport is not None:
        return delivery.pinned_transport
    return own if delivery.provider_template is not None else None


def presumed_carrier(own: str, pinned: str | None) -> str:
    """Where a claim went when no carrier was recorded for it: the transport its row is pinned to, else its own."""
    return pinned or own


async def record_carrier(ledger: CarrierLedger | None, delivery: Delivery, name: str) -> Outcome | None:
    """Before a send through ``name``, not the :func:`presumed_carrier` (a fallback; the route of a row
    pinned to a transport no longer configured): record it for a rescuer. Returns why the row is held
    back when that failed (a row is never sent unrecorded), else None."""
    try:
        recorded = ledger is not None and await ledger.record_carrier(delivery, name)
    except DatabaseError as exc:
        return Outcome.held_back(f"could not record the fallback {name} before the send: {exc}")
    return None if recorded else Outcome.held_back(f"the claim was lost before the send through {name}")
