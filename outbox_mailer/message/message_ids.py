"""Our Message-IDs: written to the row by its first claim, read back by every attempt.

A Message-ID is ``<TTTTTTTTTTTTTHHHHHHHHHHHHHHHHHHH@domain>``:

* ``T``: 13 hex digits, the first claim's time in microseconds since 1970;
* ``H``: the first 19 hex digits of HMAC-SHA256(``OUTBOX_MAILER_MESSAGE_ID_SECRET``, dedupe key),
  so the raw key never appears and nobody without the secret can forge one for a given row;
* ``domain``: the sender's domain in lower case (the row's ``from_address``, else
  ``OUTBOX_MAILER_DEFAULT_FROM``), or, when that is not plain ASCII (an internationalised
  domain, which SQL cannot convert to its ASCII form), the default sender's ASCII domain, else
  this host's name (``localhost`` if that is not a plain ASCII name either).

The claim statement computes it (the ``first_message_id`` fragment of queries.sql) from the
secret's HMAC pads that :class:`MessageIdKey` holds, and writes it to ``email_deliveries.message_id``
at once, before anything is sent, so that whoever reads the row knows what a reply or a bounce will
quote; every later attempt sends the same one, and each attempt row carries it for the webhook
receiver's look-ups. The time prefix keeps each new id at the right-hand edge of the attempt rows'
``message_id`` index: an HMAC alone would put every insert on another leaf page, and after each
checkpoint the first change of a page writes the whole page to WAL.

A row claimed by a daemon that did not write the Message-ID at the claim (older than schema 10)
has ``first_attempt_at`` set and no ``message_id``: the claim, or the rescuer taking over such a
claim, gives it the form that daemon sent, the HMAC's first 32 hex digits. For a sender with an
internationalised domain that daemon used its ASCII (punycode) form, which SQL cannot compute: such
a row, retried across the upgrade, goes out with the fallback domain instead.
"""

from __future__ import annotations

import hashlib
import re
import socket
from dataclasses import dataclass

from ..errors import CompositionError
from .addresses import SPECIAL_USE_ALLOWED, parse_address

__all__ = ["DEFAULT_KEY", "DEFAULT_SECRET", "MessageIdKey", "is_message_id"]

DEFAULT_SECRET = b"outbox-mailer message-id v1"
_BLOCK = 64  # SHA-256's block size, which HMAC pads the key to (RFC 2104)
_ASCII_DOMAIN = re.compile(r"[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?")
_MESSAGE_ID = re.compile(r"<[0-9a-f]{32}@[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?>")


@dataclass(frozen=True, slots=True)
class MessageIdKey:
    """What the claim statement needs to compute a Message-ID: parameters $8 to $11 of claim_due."""

    inner_pad: bytes  # the key XOR 0x36 repeated: HMAC's inner key
    outer_pad: bytes  # the key XOR 0x5c repeated: HMAC's outer key
    default_from: str | None
    fallback_domain: str

    @classmethod
    def of(cls, secret: bytes, default_from: str | None) -> MessageIdKey:
        key = (hashlib.sha256(secret).digest() if len(secret) > _BLOCK else secret).ljust(_BLOCK, b"\0")
        return cls(bytes(b ^ 0x36 for b in key), bytes(b ^ 0x5C for b in key), default_from,
                   _fallback_domain(default_from))


def is_message_id(value: object) -> bool:
    """Whether ``value`` has the form the claim writes (composition refuses any other: the column
    is the daemon's, but anyone with UPDATE on the table could put a header line in it)."""
    return isinstance(value, str) and _MESSAGE_ID.fullmatch(value) is not None


def _fallback_domain(default_from: str | None) -> str:
    if default_from is not None:
        try:
            domain = parse_address(default_from, "default_from", SPECIAL_USE_ALLOWED).ascii_domain.lower()
        except CompositionError:  # the settings refuse such a sender; never fail a claim for it
            domain = ""
        if _ASCII_DOMAIN.fullmatch(domain):
            return domain
    host = socket.gethostname().lower()  # not getfqdn(): no DNS query at start-up
    return host if _ASCII_DOMAIN.fullmatch(host) else "localhost"


DEFAULT_KEY = MessageIdKey.of(DEFAULT_SECRET, None)  # no secret or default sender configured
