"""Failover: which transport carries a row now, and when a row moves on to a fallback.

``OUTBOX_MAILER_SMTP__FALLBACK`` and ``OUTBOX_MAILER_TRANSPORTS__<NAME>__FALLBACK`` name the
transport that takes over (chains allowed; the settings refuse unknown names and loops). A row
moves on only when its transport **provably did not take the message**:

* the attempt found no server that could judge it (connection refused, DNS, TLS, AUTH: the cause
  ``unreachable``), or the far side refused our account (``paused``: credentials, relaying, a
  quota);
* the transport was paused when the send was to start (its circuit breaker or a quota: the
  gate held the row back);
* a throttling answer (a 429) asked to wait longer than the transport's ``FAILOVER_AFTER_SECONDS``.

Never after an ambiguous outcome (the body may have gone out: the in-doubt policy decides), never
after a refusal of the message or the recipient (a bad address stays bad), and never for a row the
daemon held back for another reason (a claim too old to start a send safely). The fallback sends
the same message: the same Message-ID, the same dedupe key as its idempotency key. Each attempt
is recorded with the transport that carried it; the row's ``transport`` column keeps what the
application asked for.

While a transport is paused, the claim takes its rows only if some transport of its chain is
open, and routes them there (:meth:`Routes.route`); once it reopens, new rows use it again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .delivery import Cause, Outcome

if TYPE_CHECKING:
    from .config import Settings
    from .gate import TransportGate

__all__ = ["Routes"]

_NOT_TAKEN = frozenset({Cause.UNREACHABLE, Cause.PAUSED})


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
        """``name``, or while it is paused the first transport of its fallback chain that is open
        (``name`` itself when every one is paused, or it has no gate: an unknown transport)."""
        current = name
        while current in self.gates and self.gates[current].is_paused(now):
            following = self.fallbacks.get(current)
            if following is None:
                return name
            current = following
        return current

    def paused_everywhere(self, name: str, now: float) -> bool:
        """Nothing could carry a row of ``name`` now: do not claim it."""
        target = self.route(name, now)
        return target in self.gates and self.gates[target].is_paused(now)

    def next_for(self, name: str, outcome: Outcome, now: float) -> str | None:
        """Where a row goes after ``outcome`` on ``name`` (already observed by its gate): an open
        transport of its fallback chain when ``name`` provably did not take it, else None."""
        fallback = self.fallbacks.get(name)
        if fallback is None or not self._not_taken(name, outcome, now):
            return None
        target = self.route(fallback, now)
        return None if self.gates[target].is_paused(now) else target

    def _not_taken(self, name: str, outcome: Outcome, now: float) -> bool:
        if outcome.cause in _NOT_TAKEN:
            return True
        if outcome.cause is Cause.HELD_BACK:  # by the gate (paused), not by the claim's age
            return self.gates[name].is_paused(now)
        wait = outcome.retry_after_seconds
        return outcome.cause is Cause.TRANSIENT and outcome.reply_code == 429 and wait is not None \
            and wait > self.waits[name]
