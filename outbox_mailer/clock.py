"""The wall clock, in one place: every decision takes ``now`` as a parameter, and this is where it comes from."""

from __future__ import annotations

import time
from datetime import UTC, datetime

# The event loop's clock, for what is computed once or more per email: asyncio's loop.time() is
# time.monotonic(), which anyio.current_time() returns after looking up the running backend (a
# fifth of a microsecond that, five times per email, was 2% of the daemon's CPU).
monotonic = time.monotonic


def utc_now() -> datetime:
    return datetime.now(UTC)
