"""Transports: the edges that hand a composed message to the outside world.

Every transport implements :class:`outbox_mailer.delivery.Transport` (the
seam: ``send()`` returns an :class:`~outbox_mailer.delivery.Outcome`, never
raises for a delivery problem). The package::

    transports/
      smtp/         the aiosmtplib edge (transport, attempt) and its pure parts (wire, replies, envelope)
      api/http.py   the one httpx edge: sends through a provider module of outbox_mailer.providers
      seam.py       keeps the documented path of batch_idempotency_key (outbox_mailer.providers.seam)
      webhook.py    keeps the documented path of verify (outbox_mailer.providers.webhook)

Each edge is the only importer of its client library and translates the
library's errors there. The pure parts every transport shares live one floor down, in
:mod:`outbox_mailer.providers`: the outcome policy (``seam``), one module per provider API and
the table of kinds (``registry``), which the settings read too. Adding a provider: one module
under ``providers/`` and one entry in :data:`outbox_mailer.providers.registry.PROVIDERS`.
The daemon builds the transports (:mod:`outbox_mailer.daemon.transport_factory`).
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
