"""Token bucket shared by every concurrent send of one transport in a daemon.

``rate_per_second`` tokens are added continuously up to ``burst``; a send
takes one, waiting for it in FIFO order. ``hold_off(seconds)`` empties the
bucket for a while, for a provider's 429 with Retry-After.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio


class TokenBucket:
    def __init__(self, rate_per_second: float, burst: int = 1, *, clock: Callable[[], float] | None = None) -> None:
        if rate_per_second <= 0 or burst < 1:
            raise ValueError("rate_per_second must be > 0 and burst >= 1")
        self.rate = rate_per_second
        self.burst = float(burst)
        self._clock = clock or anyio.current_time
        self._tokens = float(burst)
        self._stamp: float | None = None
        self._blocked_until = 0.0
        self._lock = anyio.Lock()

    def _refill(self, now: float) -> None:
        if self._stamp is not None:
            self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now

    def wait_seconds(self, now: float) -> float:
        """How long the next caller would wait (0 when a token is ready). Refills as a side effect."""
        self._refill(now)
        if now < self._blocked_until:
            return self._blocked_until - now
        missing = 1.0 - self._tokens
        return 0.0 if missing <= 1e-9 else missing / self.rate  # tolerance: float error must not spin

    async def acquire(self) -> None:
        async with self._lock:  # FIFO: one waiter at a time looks at the bucket
            while (wait := self.wait_seconds(self._clock())) > 0:
                await anyio.sleep(wait)
            self._tokens = max(0.0, self._tokens - 1.0)

    def hold_off(self, seconds: float) -> None:
        """No token for ``seconds`` (the provider said Retry-After); the bucket restarts empty."""
        now = self._clock()
        self._refill(now)
        self._blocked_until = max(self._blocked_until, now + seconds)
        self._tokens = 0.0
        self._stamp = self._blocked_until
