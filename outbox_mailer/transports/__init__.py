"""Transports: the edges that hand a composed message to the outside world.

Every transport implements :class:`outbox_mailer.delivery.Transport` (the
seam: ``send()`` returns an :class:`~outbox_mailer.delivery.Outcome`, never
raises for a delivery problem). The package::

    transports/
      seam.py       outcome policy every transport shares (pure): one_line,
                    parse_retry_after, resend_safe_until, AUTH_PAUSE_SECONDS
      registry.py   every kind in one table: smtp and one class per provider API
      factory.py    build_transports(settings), probe_sender(settings)
      smtp/         the aiosmtplib edge (transport, attempt) and its pure parts (wire, replies)
      api/          the one httpx edge (http) and one pure module per provider
                    (resend, postmark, sendgrid, webhook for kind=http)

Each edge is the only importer of its client library and translates the
library's errors there. Adding a provider: one module under ``api/`` and one
entry in :data:`~.registry.PROVIDERS` (see :mod:`.registry`).

This face imports only pure modules (no client library, no settings): the
settings (:mod:`outbox_mailer.settings.config`) read :mod:`.registry`, and the edges
read the settings, so the factory is imported from :mod:`.factory`, not here.
"""

from __future__ import annotations

from ..providers.provider import ApiRequest, ApiResponse, Provider
from ..providers.registry import API_PROVIDERS, PROVIDERS, TRANSPORT_KINDS
from ..providers.seam import (
    AUTH_PAUSE_SECONDS,
    IDEMPOTENCY_WINDOW_SHARE,
    one_line,
    parse_retry_after,
    resend_safe_until,
)

__all__ = [
    "API_PROVIDERS",
    "AUTH_PAUSE_SECONDS",
    "IDEMPOTENCY_WINDOW_SHARE",
    "PROVIDERS",
    "TRANSPORT_KINDS",
    "ApiRequest",
    "ApiResponse",
    "Provider",
    "one_line",
    "parse_retry_after",
    "resend_safe_until",
]
