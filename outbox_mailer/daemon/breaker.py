"""Circuit breaker: pause a transport while its server cannot be reached.

When a send never reaches a server that could judge the message (connection
refused, DNS failure, TLS handshake failure, greeting refused), the message
is not at fault: the daemon refunds the attempt, pauses claiming for that
transport with exponential backoff, and resumes by itself. Pure: the
monotonic time is a parameter.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Breaker:
    base_seconds: float = 1.0
    max_seconds: float = 30.0
    failures: int = 0  # consecutive unreachable outcomes
    paused_until: float = 0.0
    pauses: int = 0  # times the transport went from open to paused (a metric)

    def unreachable(self, now: float) -> float:
        """Record a failure to reach the server; returns how long the transport is paused from now."""
        self.failures += 1
        pause = min(self.max_seconds, self.base_seconds * 2.0 ** min(self.failures - 1, 30))
        self._pause_until(now, now + pause)
        return self.paused_until - now

    def pause(self, now: float, seconds: float) -> None:
        """The far side asked for a pause (quota exhausted, credentials refused)."""
        self._pause_until(now, now + seconds)

    def _pause_until(self, now: float, until: float) -> None:
        if not self.is_paused(now):
            self.pauses += 1
        self.paused_until = max(self.paused_until, until)

    def reached(self) -> None:
        """The server answered (whatever it said): close the breaker."""
        self.failures = 0
        self.paused_until = 0.0

    def is_paused(self, now: float) -> bool:
        return now < self.paused_until

    def remaining(self, now: float) -> float:
        return max(0.0, self.paused_until - now)
