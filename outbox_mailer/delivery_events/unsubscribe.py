"""One-click unsubscribe (RFC 8058): the category a row names, the signed token in its URL, the headers.

A row with ``unsubscribe_category`` (one recipient: schema 28 refuses more at INSERT) gets two header
fields from the daemon, both in the DKIM-signed list (``message/dkim_signing.py``)::

    List-Unsubscribe: <https://BASE/unsubscribe/TOKEN>
    List-Unsubscribe-Post: List-Unsubscribe=One-Click

A mailbox provider POSTs ``List-Unsubscribe=One-Click`` to that URL with no cookie or credential, so the
token alone says who leaves what, and proves we wrote it: ``KID.PAYLOAD.MAC``, each part base64url
without padding. PAYLOAD is ``row id, issued day, category, address`` (the recipient's suppression form,
``suppression.py``), joined by newlines; MAC the first 16 bytes of HMAC-SHA256 over a fixed prefix and
PAYLOAD, keyed by the key whose id is KID (a keyed hash of the key: it names the key without revealing
it). The first key of ``OUTBOX_MAILER_UNSUBSCRIBE__KEYS`` signs, every listed key verifies (rotation:
list the new key first, remove the old one once its tokens may have expired). A token is good for
``VALIDITY_DAYS`` after the day its row was created: mailbox providers may POST months later, and every
attempt of a row carries the same link (its message's bytes do not move with the day it is sent).

The payload is signed, not encrypted: the address can be read from the URL by whoever holds the message.
Pure: the standard library's ``hmac`` is all it needs (docs/unsubscribe.md says why no library).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from ..delivery import Delivery, Outcome
from .bounce_tags import day_of
from .suppression import form_or_none

__all__ = ["CATEGORY", "ONE_CLICK", "UnsubscribeKeys", "UnsubscribeLinks", "Unsubscription", "day_of"]

CATEGORY = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")  # the same rule as SQL's email_unsubscribe_category_valid
ONE_CLICK = "List-Unsubscribe=One-Click"  # the POST's body, and the List-Unsubscribe-Post header's value
HEADERS = ("List-Unsubscribe", "List-Unsubscribe-Post")
MAX_TOKEN_CHARS = 1024  # read no further: an address is at most 254 octets
_MAC_BYTES = 16
_MAC_PREFIX = b"outbox-mailer unsubscribe v1\n"
_KEY_ID_PREFIX = b"outbox-mailer unsubscribe key id\n"
_B64 = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True, slots=True)
class Unsubscription:
    """What a verified token says: this row's recipient leaves this category."""

    delivery_id: int
    address: str  # the suppression form
    category: str
    issued: int  # day_of() of the row's creation


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes | None:
    if not _B64.fullmatch(text) or len(text) % 4 == 1:
        return None
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None
    return data if _b64(data) == text else None  # one spelling per token: unused bits must be zero


class UnsubscribeKeys:
    """The keys of ``OUTBOX_MAILER_UNSUBSCRIBE__KEYS``: the first signs, each verifies."""

    def __init__(self, keys: Sequence[bytes], *, validity_days: int) -> None:
        if not keys:
            raise ValueError("at least one key")
        self._signing = keys[0]
        self._by_id = {self._key_id(k): k for k in reversed(keys)}
        self.validity_days = validity_days

    @staticmethod
    def _key_id(key: bytes) -> str:
        return _b64(hmac.new(key, _KEY_ID_PREFIX, hashlib.sha256).digest()[:6])

    def token(self, delivery_id: int, address: str, category: str, day: int) -> str:
        payload = f"{delivery_id}\n{day}\n{category}\n{address}".encode()
        mac = hmac.new(self._signing, _MAC_PREFIX + payload, hashlib.sha256).digest()[:_MAC_BYTES]
        return f"{self._key_id(self._signing)}.{_b64(payload)}.{_b64(mac)}"

    def read(self, token: str, today: int) -> Unsubscription | None:
        """What ``token`` says, or None: not signed by a listed key, altered, malformed, or too old."""
        if len(token) > MAX_TOKEN_CHARS or token.count(".") != 2:
            return None
        kid, payload_text, mac_text = token.split(".")
        key = self._by_id.get(kid)
        payload, mac = _unb64(payload_text), _unb64(mac_text)
        if key is None or payload is None or mac is None:
            return None
        expected = hmac.new(key, _MAC_PREFIX + payload, hashlib.sha256).digest()[:_MAC_BYTES]
        if not hmac.compare_digest(mac, expected):
            return None
        try:  # signed by us, so well formed; checked all the same
            row, day, category, address = payload.decode("utf-8").split("\n")
            found = Unsubscription(int(row), address, category, int(day))
        except ValueError:
            return None
        if not CATEGORY.fullmatch(category) or not address:
            return None
        if not today - self.validity_days <= found.issued <= today + 1:  # a day ahead: clocks of two hosts
            return None
        return found


@dataclass(frozen=True, slots=True)
class UnsubscribeLinks:
    """The settings' public base URL and keys: a row's two header fields."""

    base_url: str  # https://..., without a trailing slash
    keys: UnsubscribeKeys

    def url(self, token: str) -> str:
        return f"{self.base_url}/unsubscribe/{token}"

    def added(self, delivery: Delivery, now: datetime) -> Delivery | Outcome:
        """(``now``: the signature the preparation calls; the token is dated by the row's creation.)
        The row with List-Unsubscribe and List-Unsubscribe-Post among its headers (replacing any of its
        own), or why it cannot be sent: a row written past the INSERT's checks."""
        category = delivery.unsubscribe_category
        if category is None:
            return delivery
        recipients = (*delivery.to_addresses, *delivery.cc_addresses, *delivery.bcc_addresses)
        address = form_or_none(recipients[0]) if len(recipients) == 1 else None
        if address is None or not CATEGORY.fullmatch(category):
            return Outcome.unsendable(f"unsubscribe_category {category!r} needs one recipient and a category of "
                                      "1-64 a-z 0-9 . _ - (docs/unsubscribe.md)")
        token = self.keys.token(delivery.id, address, category, day_of(delivery.created_at))
        own = {k: v for k, v in delivery.headers.items() if k.lower() not in {h.lower() for h in HEADERS}}
        headers = {**own, HEADERS[0]: f"<{self.url(token)}>", HEADERS[1]: ONE_CLICK}
        return dataclasses.replace(delivery, headers=headers)


def without_links(delivery: Delivery, now: datetime) -> Delivery | Outcome:
    """A row that names a category while no unsubscribe is configured: refused, never sent without its link
    (``now``: the signature of :meth:`UnsubscribeLinks.added`)."""
    if delivery.unsubscribe_category is None:
        return delivery
    return Outcome.unsendable("unsubscribe_category is set but OUTBOX_MAILER_UNSUBSCRIBE__BASE_URL and __KEYS are "
                              "not (docs/unsubscribe.md)")
