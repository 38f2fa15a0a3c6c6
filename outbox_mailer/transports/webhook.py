"""Keeps the documented path ``outbox_mailer.transports.webhook.verify``.

What the receiver of ``kind=http`` requests uses: ``verify()`` checks a request's signature
and timestamp. The provider module, request building included, is
:mod:`outbox_mailer.providers.webhook`; this module only re-exports it.
"""

from __future__ import annotations

from ..providers.webhook import SIGNATURE_HEADER, TIMESTAMP_HEADER, signature, verify

__all__ = ["SIGNATURE_HEADER", "TIMESTAMP_HEADER", "signature", "verify"]
