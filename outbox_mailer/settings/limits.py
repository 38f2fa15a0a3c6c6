"""The settings every transport has for its limits and its failover (``OUTBOX_MAILER_SMTP__...``,
``OUTBOX_MAILER_TRANSPORTS__<NAME>__...``).

``RATE_PER_SECOND``/``BURST`` count requests (an SMTP transaction, an API call, a batch call) and
``DAILY_LIMIT`` counts recipients over a rolling ``DAILY_WINDOW_SECONDS``; both are shared by every
daemon on the database (quotas.py). ``FALLBACK`` and ``FAILOVER_AFTER_SECONDS`` are failover.py's.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

HOUR, DAY, WEEK = 3600.0, 86_400.0, 604_800.0
MIN_RATE, MAX_RATE = 0.001, 100_000  # requests per second (one per ~17 min .. 100k/s)
MAX_DAILY = 1_000_000_000  # recipients per window
FINITE = ConfigDict(allow_inf_nan=False)  # "inf", "nan" are refused by every float field


class LimitSettings(BaseModel):
    model_config = FINITE

    rate_per_second: float | None = Field(default=None, ge=MIN_RATE, le=MAX_RATE)  # None: no rate limit (Resend: 2/s); 0.001-100000
    burst: int = Field(default=1, ge=1, le=MAX_RATE)  # requests allowed at once above the rate; 1-100000
    daily_limit: int | None = Field(default=None, ge=1, le=MAX_DAILY)  # recipients per window; None: no limit
    daily_window_seconds: float = Field(default=DAY, ge=1, le=WEEK)  # the rolling window of daily_limit; 1 s-7 days
    fallback: str | None = None  # the transport that takes a row this one provably did not accept (failover.py)
    failover_after_seconds: float = Field(default=60.0, gt=0, le=DAY)  # a throttling wait longer than this fails over

    @property
    def effective_rate_per_second(self) -> float | None:
        return self.rate_per_second

    @property
    def limited(self) -> bool:
        """A limit shared through the database applies (quotas.py)."""
        return self.effective_rate_per_second is not None or self.daily_limit is not None
