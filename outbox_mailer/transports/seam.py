"""What every transport shares at the seam (:class:`outbox_mailer.delivery.Transport`): outcome policy.

Pure: no I/O, no client library. The seam's types (``Outcome`` and its
``Cause`` constructors, ``ComposedMessage``, ``Delivery``) live in
:mod:`outbox_mailer.delivery`; this module holds the rules the transports
(and the daemon) apply the same way:

* :func:`one_line` – a reply or error text as one bounded line;
* :func:`parse_retry_after` – ``Retry-After`` as seconds from now;
* :func:`resend_safe_until` – until when a resend with the same idempotency key
  is absorbed by the far side: ``first_attempt_at + IDEMPOTENCY_WINDOW_SHARE * window``;
* :data:`AUTH_PAUSE_SECONDS` – how long refused credentials pause a transport.
"""

from __future__ import annotations

import email.utils
import math
from datetime import UTC, datetime, timedelta

from ..delivery import Delivery

__all__ = [
    "AUTH_PAUSE_SECONDS",
    "IDEMPOTENCY_WINDOW_SHARE",
    "MAX_ERROR_TEXT",
    "one_line",
    "parse_retry_after",
    "resend_safe_until",
]

AUTH_PAUSE_SECONDS = 300.0  # credentials refused: pause the transport this long, then try again
IDEMPOTENCY_WINDOW_SHARE = 0.9  # trust a provider's key window only up to 90% of its stated length
MAX_ERROR_TEXT = 400


def one_line(text: str, limit: int = MAX_ERROR_TEXT) -> str:
    """``text`` with its whitespace runs collapsed to one space, cut to ``limit`` characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """``Retry-After`` as seconds from ``now``: delta-seconds or an HTTP-date; None if absent or bad."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return max(0.0, (when - now).total_seconds())
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def resend_safe_until(delivery: Delivery, window_seconds: float | None) -> datetime | None:
    """Until when a resend with the same idempotency key is absorbed by the provider.

    None when the far side keeps no key window (``window_seconds`` None or 0) or
    the row has no first attempt on record.
    """
    if not window_seconds or delivery.first_attempt_at is None:
        return None
    return delivery.first_attempt_at + timedelta(seconds=window_seconds * IDEMPOTENCY_WINDOW_SHARE)
