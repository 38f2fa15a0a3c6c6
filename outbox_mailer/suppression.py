"""Suppressed addresses: their one normal form, and what a claimed row's suppressed recipients mean.

The form (the same as the SQL function ``outbox_mailer_suppression_address`` in
``sql/0009_delivery_events.sql``, which the claim compares with): the address inside
``Name <...>`` if there is one, in Unicode normal form C, its ASCII letters in lower case (only
those: PostgreSQL's lower() depends on the database's locale, so both sides lower-case ASCII alone
and other letters compare as written), with an internationalised domain in its Unicode form (an
``xn--`` domain is decoded, so ``zoë@exämple.com`` and ``zoë@xn--exmple-cua.com`` are one address).
Providers compare case-insensitively too.

A row whose every recipient is suppressed fails without a network call, ``last_error``
starting with ``suppressed:``; otherwise its suppressed recipients are left out of the message
(its To, Cc and Bcc, so no transport sends to them) and written on the attempt. A row with ``ignore_suppressions`` is never screened (the claim
returns nothing for it).
"""

from __future__ import annotations

import dataclasses
import re
import string
import unicodedata
from dataclasses import dataclass

import idna

from .delivery import Delivery, Outcome, RefusedRecipient

_IN_BRACKETS = re.compile(r"<([^<>]*)>\s*$")
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)  # lower(... COLLATE "C")
REASONS = ("hard_bounce", "complaint", "unsubscribe", "manual")
SUPPRESSED = "suppressed: "  # how last_error starts for a row failed because every recipient is suppressed


def normal_address(raw: str) -> str:
    """The suppression form of an address as a row, an event or an operator gives it.
    ValueError when it is not an address."""
    m = _IN_BRACKETS.search(raw)
    address = unicodedata.normalize("NFC", (m.group(1) if m else raw).strip()).translate(_ASCII_LOWER)
    local, at, domain = address.rpartition("@")
    if not at or not local or not domain or any(c.isspace() or c in "<>" for c in address):
        raise ValueError(f"not an email address: {raw!r}")
    if any(label.startswith("xn--") for label in domain.split(".")):
        try:
            domain = idna.decode(domain)
        except idna.IDNAError as exc:
            raise ValueError(f"not a valid internationalised domain: {domain!r} ({exc})") from None
    return f"{local}@{domain}"


def _key(raw: str) -> str:
    """What the claim compared: the SQL form (without the xn-- decoding, which SQL cannot do)."""
    m = _IN_BRACKETS.search(raw)
    return unicodedata.normalize("NFC", (m.group(1) if m else raw).strip()).translate(_ASCII_LOWER)


@dataclass(frozen=True, slots=True)
class Suppressed:
    address: str  # in the normal form
    reason: str
    since: str  # YYYY-MM-DD (UTC)

    @classmethod
    def parse(cls, text: str) -> Suppressed:
        address, reason, since = text.split(" ")
        return cls(address, reason, since)

    def describe(self) -> str:
        return f"{self.address} ({self.reason} since {self.since})"


@dataclass(frozen=True, slots=True)
class Screened:
    """A row after its suppressed recipients were taken out of it."""

    delivery: Delivery  # to send (its envelope without them); unchanged when none is suppressed
    refusal: Outcome | None  # every recipient suppressed: fail it, send nothing
    dropped: tuple[RefusedRecipient, ...]  # written on the attempt


def screen(delivery: Delivery) -> Screened:
    """Take the recipients the claim found suppressed (``delivery.suppressed``) out of the row: out
    of its To, Cc and Bcc (every transport builds its request from them: an API provider's fields
    as much as the SMTP envelope), and out of the recipients a partial retry still owes."""
    if not delivery.suppressed:
        return Screened(delivery, None, ())
    by_key = _by_key(delivery)
    owed = delivery.retry_recipients
    candidates = owed if owed is not None else (*delivery.to_addresses, *delivery.cc_addresses,
                                                *delivery.bcc_addresses)
    dropped = _found(by_key, candidates)
    if not dropped:
        return Screened(delivery, None, ())
    kept = [raw for raw in candidates if _key(raw) not in by_key]
    to, cc, bcc = ([a for a in field if _key(a) not in by_key]
                   for field in (delivery.to_addresses, delivery.cc_addresses, delivery.bcc_addresses))
    if not to and cc:
        to, cc = cc[:1], cc[1:]  # a message needs a To: the first Cc takes the place
    if not kept or not to:  # nobody left, or Bcc alone, which no header may name
        text = "; ".join(s.describe() for s in dropped)
        return Screened(delivery, Outcome.unsendable(SUPPRESSED + text), ())
    notes = tuple(RefusedRecipient(s.address, None, f"suppressed: {s.reason} since {s.since}") for s in dropped)
    screened = dataclasses.replace(
        delivery, to_addresses=tuple(to), cc_addresses=tuple(cc), bcc_addresses=tuple(bcc),
        retry_recipients=tuple(_addr_spec(r) for r in kept) if owed is not None else None)
    return Screened(screened, None, notes)


def suppressed_among(delivery: Delivery) -> list[Suppressed]:
    """Which of the row's To, Cc and Bcc the claim found suppressed, each address once (a replayed
    batch request goes to the recipients it first carried, suppressed since or not)."""
    if not delivery.suppressed:
        return []
    return _found(_by_key(delivery), (*delivery.to_addresses, *delivery.cc_addresses, *delivery.bcc_addresses))


def _by_key(delivery: Delivery) -> dict[str, Suppressed]:
    return {s.address: s for s in map(Suppressed.parse, delivery.suppressed)}


def _found(by_key: dict[str, Suppressed], candidates: tuple[str, ...]) -> list[Suppressed]:
    return list({hit.address: hit for raw in candidates if (hit := by_key.get(_key(raw)))}.values())


def _addr_spec(raw: str) -> str:
    m = _IN_BRACKETS.search(raw)
    return (m.group(1) if m else raw).strip()
