"""SMTP: the aiosmtplib edge and the pure rules it applies.

* :mod:`.transport` – :class:`SmtpTransport`: a pool of persistent connections,
  sessions, ``send`` and ``check`` (with :mod:`.attempt`, the only importers of aiosmtplib);
* :mod:`.attempt` – one send, phase by phase, pipelined or one command at a time;
* :mod:`.wire` – reading pipelined replies (plain asyncio);
* :mod:`.replies` – what a reply means for the message (pure).
"""

from __future__ import annotations

from .envelope import probe_recipient
from .replies import classify_reply
from .transport import SmtpTransport

__all__ = ["SmtpTransport", "classify_reply", "probe_recipient"]
