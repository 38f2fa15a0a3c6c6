"""What the receiver of ``kind=http`` requests uses: the documented home of :func:`verify`.

``outbox_mailer.transports.webhook.verify()`` checks a request's signature and
timestamp (see :mod:`outbox_mailer.transports.api.webhook`, where the
provider module lives).
"""

from __future__ import annotations

from .api.webhook import SIGNATURE_HEADER, TIMESTAMP_HEADER, signature, verify

__all__ = ["SIGNATURE_HEADER", "TIMESTAMP_HEADER", "signature", "verify"]
