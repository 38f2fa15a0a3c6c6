"""Keeps the documented path ``outbox_mailer.transports.seam.batch_idempotency_key``.

The seam's outcome policy lives in :mod:`outbox_mailer.providers.seam`, below the settings;
this module only re-exports it.
"""

from __future__ import annotations

from ..providers.seam import (
    AUTH_PAUSE_SECONDS,
    IDEMPOTENCY_WINDOW_SHARE,
    batch_idempotency_key,
    one_line,
    parse_retry_after,
    resend_safe_until,
)

__all__ = [
    "AUTH_PAUSE_SECONDS",
    "IDEMPOTENCY_WINDOW_SHARE",
    "batch_idempotency_key",
    "one_line",
    "parse_retry_after",
    "resend_safe_until",
]
