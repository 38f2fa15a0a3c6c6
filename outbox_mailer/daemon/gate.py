"""Admission to one transport, and what its outcomes teach the daemon.

A :class:`TransportGate` holds, for one transport:

* optionally its limits shared by every daemon on the database (quotas.py: the request rate,
  the daily recipients; a throttling reply lowers the shared rate);
* a circuit breaker (an unreachable server pauses the transport with backoff;
  an outcome may also ask for an explicit pause: quota, refused credentials, the daily limit
  reached); each time it opens, the pause is to be published (:attr:`opened`, pauses.py);
* an operator's pause (``outbox-mailer pause``, the console), as pauses.py last read it from the
  database: until its end, or until resumed.

:meth:`is_paused` is the one answer to "is this transport paused", whichever paused it.

:meth:`admit` runs right before a send: it waits for the send's share of the limits, and holds
the send back when the transport is paused; :meth:`observe` feeds the breaker and the limits with
the send's outcome. Queues and workers are the lanes' (lanes.py); the send itself, and the check
that its claim is young enough to start, are the executor's (executor.py).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from datetime import datetime

from ..clock import monotonic
from ..delivery import Cause, Outcome
from ..store.pauses import PauseState
from .breaker import Breaker
from .quotas import SharedLimit, throttling

log = logging.getLogger("outbox_mailer")

OPERATOR_RECHECK_SECONDS = 1.0  # a row held back by an operator's pause is due again this soon (a resume may come)


class TransportGate:
    def __init__(self, name: str, breaker: Breaker, limit: SharedLimit | None = None) -> None:
        self.name = name
        self.breaker = breaker
        self.limit = limit
        self.held_off_until = 0.0  # a 429 asked to wait until then (failover.py routes around a long one)
        self.operator_until = 0.0  # monotonic end of an operator's pause (inf: until resumed; 0: none)
        self.opened: tuple[float, str] | None = None  # the breaker opened: (its end, monotonic; why), to publish
        self.published_at: datetime | None = None  # the database's time of the breaker pause published last

    def is_paused(self, now: float) -> bool:
        """Whether this transport is paused at ``now`` (monotonic), by its breaker or by an operator: the
        one answer the claimer, the routes, the health check and the metrics ask for."""
        return self.breaker.is_paused(now) or now < self.operator_until

    def paused_for(self, now: float) -> float:
        """Seconds until this transport may take rows again (0 while it is not paused); an operator's
        pause counts as OPERATOR_RECHECK_SECONDS at most, since a resume may end it at any time."""
        operator = min(self.operator_until - now, OPERATOR_RECHECK_SECONDS) if now < self.operator_until else 0.0
        return max(self.breaker.remaining(now), operator)

    def read_pause(self, state: PauseState, now: float) -> None:
        """What the database says now (pauses.py): the operator's pause in force, and the latest resume,
        which closes this daemon's breaker when its pause was published before it."""
        until = 0.0 if not state.paused else math.inf if state.seconds_left is None else now + state.seconds_left
        if (until > now) != (self.operator_until > now):
            if until > now:
                log.warning("transport %s paused by %s%s", self.name, state.paused_by,
                            f": {state.reason}" if state.reason else "")
            else:
                log.warning("transport %s: the operator's pause ended", self.name)
        self.operator_until = until
        if state.resumed_at is not None and self.published_at is not None and state.resumed_at > self.published_at:
            self.published_at = None
            if self.breaker.is_paused(now):
                log.warning("transport %s resumed by an operator: circuit breaker closed", self.name)
                self.breaker.reached()

    def held_off_seconds(self, now: float) -> float:
        """How long a 429 asked to wait, here or (through the shared limits) at another daemon."""
        shared = self.limit.held_until if self.limit is not None else 0.0
        return max(0.0, self.held_off_until - now, shared - now)

    def requests_within(self, seconds: float) -> int | None:
        """Requests this transport may start within ``seconds``: none while its next request slot (or a
        429's hold) comes later, else that one and one per interval of the shared rate in force after
        it; None: no shared rate."""
        rate = self.limit.rate_in_force if self.limit is not None else None
        if self.limit is None or rate is None:
            return None
        first = self.next_request_in()
        return 0 if first > seconds else 1 + math.floor(rate * (seconds - first))

    def next_request_in(self) -> float:
        """Seconds until this transport may start its next request: its next slot of the shared rate,
        or the end of a 429's hold."""
        slot = self.limit.next_slot_in() if self.limit is not None else 0.0
        return max(slot, self.held_off_seconds(monotonic()))

    def fits_one_request(self, recipients: int) -> bool:
        """A request for this many recipients could ever pass DAILY_LIMIT (a batch that could not goes singly)."""
        daily = self.limit.daily_limit if self.limit is not None else None
        return daily is None or recipients <= daily

    async def admit(self, recipients: int = 1, within: float = math.inf) -> Outcome | None:
        """Wait for one request's share of the limits, for ``recipients``, if it comes within ``within``
        seconds; None when a send may start now, else why it may not (the caller checks the claim's age
        after this wait)."""
        paused = self._paused()
        if paused is not None or self.limit is None:
            return paused
        # the wait for a share of the limits may outlast a pause that began meanwhile
        return await self.limit.take(recipients, within) or self._paused()

    def _paused(self) -> Outcome | None:
        now = monotonic()
        if self.is_paused(now):
            return Outcome.held_back(f"transport {self.name!r} is paused", retry_after_seconds=self.paused_for(now))
        return None

    def observe(self, outcome: Outcome) -> Outcome:
        """Feed the breaker and the rate limiter; returns the outcome with its retry time adjusted."""
        now = monotonic()
        if outcome.cause is Cause.PAUSED and outcome.pause_seconds:
            was_paused = self.breaker.is_paused(now)
            self.breaker.pause(now, outcome.pause_seconds)
            if not was_paused:  # one line per pause, not one per send that was in flight
                log.error("transport %s paused for %.0fs: %s", self.name, outcome.pause_seconds, outcome.error)
                self.opened = (self.breaker.paused_until, outcome.error or "paused")
            return dataclasses.replace(
                outcome, retry_after_seconds=max(outcome.pause_seconds, outcome.retry_after_seconds or 0))
        if outcome.retry_after_seconds and outcome.reply_code == 429:
            self.held_off_until = max(self.held_off_until, now + outcome.retry_after_seconds)
        if self.limit is not None and throttling(outcome):
            self.limit.throttled(outcome.retry_after_seconds)  # slows every daemon's sends of it
        if outcome.cause is Cause.UNREACHABLE:
            was_paused = self.breaker.is_paused(now)
            pause = self.breaker.unreachable(now)
            if not was_paused:
                log.warning("transport %s unreachable (%s): paused for %.1fs, attempts not charged",
                            self.name, outcome.error, pause)
                self.opened = (self.breaker.paused_until, f"unreachable: {outcome.error or 'no server answered'}")
            return dataclasses.replace(outcome, retry_after_seconds=max(pause, outcome.retry_after_seconds or 0))
        if outcome.charge_attempt and self.breaker.failures:
            log.info("transport %s reachable again after %d failed tries", self.name, self.breaker.failures)
            self.breaker.reached()
        return outcome
