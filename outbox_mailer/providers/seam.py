"""What every transport shares at the seam (:class:`outbox_mailer.delivery.Transport`): outcome policy.

Pure: no I/O, no client library. The seam's types (``Outcome`` and its
``Cause`` constructors, ``ComposedMessage``, ``Delivery``) live in
:mod:`outbox_mailer.delivery`; this module holds the rules the transports
(and the daemon) apply the same way:

* :func:`one_line` – a reply or error text as one bounded line;
* :func:`parse_retry_after` – ``Retry-After`` as seconds from now;
* :func:`resend_safe_until` – until when a resend with the same idempotency key
  is absorbed by the far side: ``first_attempt_at + IDEMPOTENCY_WINDOW_SHARE * window``;
* :func:`batch_idempotency_key` – the one idempotency key of a batch request, derived
  from its members, so that a resend of the identical batch carries the identical key;
* :data:`AUTH_PAUSE_SECONDS` – how long refused credentials pause a transport.
"""

from __future__ import annotations

import email.utils
import hashlib
import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from ..delivery import Delivery

__all__ = [
    "AUTH_PAUSE_SECONDS",
    "BATCH_KEY_PREFIX",
    "IDEMPOTENCY_WINDOW_SHARE",
    "MAX_ERROR_TEXT",
    "batch_idempotency_key",
    "one_line",
    "parse_retry_after",
    "resend_safe_until",
]

AUTH_PAUSE_SECONDS = 300.0  # credentials refused: pause the transport this long, then try again
IDEMPOTENCY_WINDOW_SHARE = 0.9  # trust a provider's key window only up to 90% of its stated length
MAX_ERROR_TEXT = 400
BATCH_KEY_PREFIX = "batch-"


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


def batch_idempotency_key(dedupe_keys: Sequence[str]) -> str:
    """The idempotency key of a batch request: ``"batch-"`` + hex SHA-256 of its members' keys.

    The digest runs over each member's ``dedupe_key`` in request order, each as its
    UTF-8 length (4 bytes, big-endian) followed by its UTF-8 bytes, so that no two
    member lists share a key (``["ab", "c"]`` and ``["a", "bc"]`` differ) and the same
    list always gives the same key: 70 printable ASCII characters, within Resend's 256.
    """
    if not dedupe_keys:
        raise ValueError("a batch has at least one member")
    digest = hashlib.sha256()
    for key in dedupe_keys:
        encoded = key.encode("utf-8")
        digest.update(len(encoded).to_bytes(4, "big"))
        digest.update(encoded)
    return BATCH_KEY_PREFIX + digest.hexdigest()
