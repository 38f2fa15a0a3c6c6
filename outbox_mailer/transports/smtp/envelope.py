"""The envelope of an SMTP transaction: what may go on its command lines, the check's probe
recipient, and the position a bounce tag gives a recipient (:mod:`outbox_mailer.delivery_events.bounce_tags`)."""

from __future__ import annotations

import functools
import re

from aiosmtplib.email import parse_address

from ...delivery import ComposedMessage, Delivery
from ...errors import CompositionError
from ...message.addresses import SPECIAL_USE_ALLOWED
from ...message.addresses import parse_address as parse_row_address

__all__ = ["PROBE_LOCAL_PART", "address_problem", "envelope_problem", "listed_index", "probe_recipient"]

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
PROBE_LOCAL_PART = "outbox-mailer-check"
# An addr-spec of an ASCII dot-atom local part at dot-separated labels of letters, digits and hyphens:
# nothing aiosmtplib's parser could read differently (no specials, no spaces, no quotes), so it is
# sent as written. Every composed address is one, bar the internationalised and the quoted ones.
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
PLAIN_ADDR_SPEC = re.compile(rf"{_ATEXT}(?:\.{_ATEXT})*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*")


def probe_recipient(sender: str) -> str:
    """The check's RCPT: at an RFC 2606 domain that is not the sender's."""
    domain = "example.net" if sender.rpartition("@")[2].lower() == "example.com" else "example.com"
    return f"{PROBE_LOCAL_PART}@{domain}"


def envelope_problem(message: ComposedMessage) -> str | None:
    """Why the envelope cannot go on an SMTP command line, or None."""
    if not message.recipients:
        return "envelope has no recipients"
    roles = [("sender", message.sender)] + [("recipient", r) for r in message.recipients]
    for role, address in roles:
        problem = address_problem(role, address)
        if problem:
            return f"envelope {role} {address!r} {problem}"
    return None


def address_problem(role: str, address: str) -> str | None:
    """Why ``address`` cannot go on a MAIL or RCPT command line as the ``role``, or None."""
    if PLAIN_ADDR_SPEC.fullmatch(address) is not None:  # ~0.5 µs: most addresses, each new recipient
        return None
    return parsed_address_problem(role, address)


@functools.lru_cache(maxsize=4096)  # pure; parseaddr is slow (~20 µs)
def parsed_address_problem(role: str, address: str) -> str | None:
    """:func:`address_problem` by aiosmtplib's own parsing: the answer for every address."""
    if _CONTROL.search(address):
        return "contains control characters"
    if role == "recipient" and "@" not in address:
        return "is not an address"
    try:
        if parse_address(address) != address:
            return "is not a bare address"
    except ValueError:
        return "contains characters not allowed on an SMTP command line"
    return None


def listed_index(delivery: Delivery, recipient: str) -> int:
    """The position (from 1) of an envelope recipient among the row's listed addresses (to, cc, bcc as
    stored), which a recipient's bounce tag names; 0 when it is none of them (a staging redirect)."""
    wanted = recipient.lower()
    for n, listed in enumerate(delivery.listed or (*delivery.to_addresses, *delivery.cc_addresses,
                                                   *delivery.bcc_addresses), 1):
        try:
            if parse_row_address(listed, "to", SPECIAL_USE_ALLOWED).addr_spec.lower() == wanted:
                return n
        except CompositionError:
            continue
    return 0
