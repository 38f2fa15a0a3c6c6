"""Admission to one transport, and what its outcomes teach the daemon.

A :class:`TransportGate` holds, for one transport:

* an optional token bucket (rate limit shared by the daemon's sends; a 429
  with Retry-After empties it for that long);
* a circuit breaker (an unreachable server pauses the transport with backoff;
  an outcome may also ask for an explicit pause: quota, refused credentials).

:meth:`admit` runs right before a send and holds it back when the transport
is paused or the row's claim is too old to start safely; :meth:`observe` feeds
the breaker and the bucket with the send's outcome. Queues and workers are the
lanes' (lanes.py); the send itself is the executor's (executor.py).
"""

from __future__ import annotations

import dataclasses
import logging

import anyio

from .breaker import Breaker
from .delivery import Cause, Outcome
from .ratelimit import TokenBucket

log = logging.getLogger("outbox_mailer")


class TransportGate:
    def __init__(self, name: str, breaker: Breaker, limiter: TokenBucket | None) -> None:
        self.name = name
        self.breaker = breaker
        self.limiter = limiter
        self.held_off_until = 0.0  # a 429 asked to wait until then (failover.py routes around a long one)

    def is_paused(self, now: float) -> bool:
        return self.breaker.is_paused(now)

    def held_off_seconds(self, now: float) -> float:
        return max(0.0, self.held_off_until - now)

    async def admit(self) -> Outcome | None:
        """Wait for the rate limit; None when a send may start now, else why it is held back
        (the caller checks the claim's age after this wait)."""
        if self.limiter is not None:
            await self.limiter.acquire()
        now = anyio.current_time()
        if self.breaker.is_paused(now):
            return Outcome.held_back(f"transport {self.name!r} is paused",
                                     retry_after_seconds=self.breaker.remaining(now))
        return None

    def observe(self, outcome: Outcome) -> Outcome:
        """Feed the breaker and the rate limiter; returns the outcome with its retry time adjusted."""
        now = anyio.current_time()
        if outcome.cause is Cause.PAUSED and outcome.pause_seconds:
            was_paused = self.breaker.is_paused(now)
            self.breaker.pause(now, outcome.pause_seconds)
            if not was_paused:  # one line per pause, not one per send that was in flight
                log.error("transport %s paused for %.0fs: %s", self.name, outcome.pause_seconds, outcome.error)
            return dataclasses.replace(
                outcome, retry_after_seconds=max(outcome.pause_seconds, outcome.retry_after_seconds or 0))
        if outcome.retry_after_seconds and outcome.reply_code == 429:
            self.held_off_until = max(self.held_off_until, now + outcome.retry_after_seconds)
            if self.limiter is not None:
                self.limiter.hold_off(outcome.retry_after_seconds)  # "too many requests" slows every send of it
        if outcome.cause is Cause.UNREACHABLE:
            was_paused = self.breaker.is_paused(now)
            pause = self.breaker.unreachable(now)
            if not was_paused:
                log.warning("transport %s unreachable (%s): paused for %.1fs, attempts not charged",
                            self.name, outcome.error, pause)
            return dataclasses.replace(outcome, retry_after_seconds=max(pause, outcome.retry_after_seconds or 0))
        if outcome.charge_attempt and self.breaker.failures:
            log.info("transport %s reachable again after %d failed tries", self.name, self.breaker.failures)
            self.breaker.reached()
        return outcome
