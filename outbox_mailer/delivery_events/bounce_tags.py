"""Bounce address tags (VERP): an envelope sender that lets a bounce prove which email, and which of
its recipients, it is about.

With ``OUTBOX_MAILER_BOUNCES__ADDRESS=bounces@example.com`` every SMTP transaction goes out with
``MAIL FROM:<bounces+TAG@example.com>``, where ``TAG`` is ``ID.INDEX.DAY.MAC``:

* ``ID``: the row's id, in base 36;
* ``INDEX``: ``0`` when the transaction carries the message to all its recipients; ``n`` when it
  carries it to the row's n-th listed recipient alone (``to_addresses``, then ``cc_addresses``,
  then ``bcc_addresses``, counted from 1; ``OUTBOX_MAILER_BOUNCES__PER_RECIPIENT``), in base 36;
* ``DAY``: the day it was sent, days since 1970-01-01 UTC, in base 36;
* ``MAC``: the first 80 bits of HMAC-SHA256(``OUTBOX_MAILER_BOUNCES__KEY``, ``"ID.INDEX.DAY"``),
  in lower-case base 32.

Never the address itself: the tag is ASCII whatever the recipient (it needs no SMTPUTF8) and at most
:data:`MAX_TAG_OCTETS` long, so a local part of up to :data:`MAX_LOCAL_OCTETS` keeps the tagged one
within RFC 5321's 64 octets. Lower case only, so an MTA that folds the case of local parts keeps it
readable.

A tag verifies under the current key or ``OUTBOX_MAILER_BOUNCES__PREVIOUS_KEY`` (rotation), from its
day until :data:`MAX_AGE_DAYS` later; a day ahead of today by more than one is refused. Anyone who
received the message sees its envelope sender (the ``Return-Path`` header): a tag of index 0 proves
the email, not which recipient; only a tag of index n proves recipient n (receiver/intake.py).
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

__all__ = ["MAX_AGE_DAYS", "MAX_LOCAL_OCTETS", "BounceAddress", "BounceTag", "Unproven", "day_of"]

MAX_AGE_DAYS = 30  # bounces come within the sending MTA's queue lifetime (Postfix: 5 days)
MAX_INDEX = 36**4 - 1  # a recipient further down the list is sent with the message's tag
_MAC_BYTES = 10
MAX_TAG_OCTETS = 13 + 1 + 4 + 1 + 4 + 1 + 16  # id (2**63 in base 36), index, day, MAC
MAX_LOCAL_OCTETS = 64 - 1 - MAX_TAG_OCTETS
_TAG = re.compile(r"([0-9a-z]{1,13})\.([0-9a-z]{1,4})\.([0-9a-z]{1,4})\.([a-z2-7]{16})")
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True, slots=True)
class BounceTag:
    """What a verified tag proves: the bounce is about row ``delivery_id``, sent on ``day``; about its
    ``index``-th listed recipient (0: about the message, not a recipient)."""

    delivery_id: int
    index: int
    day: int


class Unproven(enum.Enum):
    """What a bounce's envelope recipient proves when it is not a verified tag."""

    UNTAGGED = "untagged"  # no tag at all (not told the recipient, or our plain address)
    FORGED = "forged"  # a tag that does not verify: wrong MAC, too old, malformed


def day_of(moment: datetime) -> int:
    """Days since 1970-01-01 in UTC (``moment`` timezone-aware)."""
    return int(moment.timestamp() // 86400)


def _base36(n: int) -> str:
    digits = ""
    while True:
        n, d = divmod(n, 36)
        digits = _DIGITS[d] + digits
        if n == 0:
            return digits


def _mac(key: bytes, text: str) -> str:
    digest = hmac.new(key, text.encode("ascii"), hashlib.sha256).digest()[:_MAC_BYTES]
    return base64.b32encode(digest).decode("ascii").lower()


class BounceAddress:
    """Mints and reads tagged envelope senders for one configured bounce address."""

    def __init__(self, address: str, keys: Sequence[bytes]) -> None:
        """``address``: ``local@domain`` (checked by the settings); ``keys``: the current key first,
        then the previous one still accepted."""
        if not keys:
            raise ValueError("a bounce address needs a key")
        self.local, _, self.domain = address.rpartition("@")
        self._prefix = self.local.lower() + "+"
        self._keys = tuple(keys)

    def sender(self, delivery_id: int, index: int, day: int) -> str:
        """The envelope sender for row ``delivery_id``'s transaction to recipient ``index`` (0: all)."""
        if not 0 <= index <= MAX_INDEX:
            index = 0
        text = f"{_base36(delivery_id)}.{_base36(index)}.{_base36(day)}"
        return f"{self.local}+{text}.{_mac(self._keys[0], text)}@{self.domain}"

    def read(self, recipient: str, today: int) -> BounceTag | Unproven:
        """What the envelope recipient a bounce was delivered to proves (``today``: :func:`day_of` now)."""
        local = recipient.strip().removeprefix("<").removesuffix(">").rpartition("@")[0].lower()
        if not local.startswith(self._prefix):
            return Unproven.UNTAGGED
        found = _TAG.fullmatch(local[len(self._prefix):])
        if found is None:
            return Unproven.FORGED
        text = f"{found[1]}.{found[2]}.{found[3]}"
        if not any(hmac.compare_digest(_mac(key, text), found[4]) for key in self._keys):
            return Unproven.FORGED
        delivery_id, index, day = (int(found[n], 36) for n in (1, 2, 3))
        if not today - MAX_AGE_DAYS <= day <= today + 1 or delivery_id >= 2**63:
            return Unproven.FORGED
        return BounceTag(delivery_id, index, day)
