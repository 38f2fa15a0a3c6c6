"""The staging guard: a database restored from production must never mail real customers.

Two settings, never both:

* ``OUTBOX_MAILER_ALLOWED_RECIPIENTS``: comma-separated addresses, ``@domain`` (that domain) and
  ``@*.domain`` (any name under it, not the domain itself). A row with any recipient (To, Cc or
  Bcc) outside the list fails whole, without a network call, ``last_error`` naming the setting
  and the addresses.
* ``OUTBOX_MAILER_REDIRECT_TO``: every email goes to that one address instead, with its original
  To and Cc recipients in an ``X-Original-To`` header and its subject unchanged; Bcc recipients
  appear in no header, they are listed on the attempt.

Addresses are compared in the envelope's form, the one suppressions use too
(:func:`outbox_mailer.message.addresses.mailbox_form`).
The executor applies the guard to each claimed row after its suppressed recipients are taken out
and before it is composed, so every transport, SMTP or API, sends what the guard left.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..delivery import Delivery, Outcome, RefusedRecipient
from ..errors import CompositionError
from .addresses import DEFAULT_POLICY, AddressPolicy, mailbox_form, parse_address

__all__ = ["ALLOWED_SETTING", "REDIRECT_SETTING", "Guarded", "StagingGuard", "allowed_patterns",
           "checked_redirect"]

ALLOWED_SETTING = "OUTBOX_MAILER_ALLOWED_RECIPIENTS"
REDIRECT_SETTING = "OUTBOX_MAILER_REDIRECT_TO"
ORIGINAL_TO = "X-Original-To"


def allowed_patterns(value: str) -> tuple[str, ...]:
    """The setting's patterns in normal form; ValueError naming the first bad one."""
    patterns = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            raise ValueError(f"an empty entry in {value!r}: name addresses, @domain or @*.domain, "
                             "separated by commas")
        if item.startswith("@*."):
            patterns.append("@*." + _domain(item[3:], item))
        elif item.startswith("@"):
            patterns.append("@" + _domain(item[1:], item))
        else:
            try:
                patterns.append(mailbox_form(item))
            except CompositionError:
                raise ValueError(f"{item!r} is not an address, @domain or @*.domain") from None
            if "<" in item:
                raise ValueError(f"{item!r}: give the address alone, without a display name")
    return tuple(patterns)


def checked_redirect(value: str, policy: AddressPolicy = DEFAULT_POLICY) -> str:
    """The redirect address, checked with composition's own rules and policy (else every row would fail)."""
    try:
        parse_address(value, "redirect_to", policy)
    except CompositionError as exc:
        raise ValueError(f"{value!r} is not an address mail can be sent to: {exc.reason}") from None
    return value


def _domain(domain: str, item: str) -> str:
    try:
        normal = mailbox_form(f"x@{domain}").split("@", 1)[1]
    except CompositionError:
        normal = ""
    if not normal or any(not label for label in normal.split(".")) or "*" in normal or "@" in normal:
        raise ValueError(f"{item!r}: {domain!r} is not a domain name")
    return normal


@dataclass(frozen=True, slots=True)
class Guarded:
    """A row after the guard: what to send, or why it must not be sent."""

    delivery: Delivery
    refusal: Outcome | None
    notes: tuple[RefusedRecipient, ...]  # written on the attempt


@dataclass(frozen=True, slots=True)
class StagingGuard:
    allowed: tuple[str, ...] = ()  # normal-form patterns; empty: no allow-list
    redirect_to: str | None = None

    @classmethod
    def of(cls, allowed_recipients: str | None, redirect_to: str | None) -> StagingGuard | None:
        """The guard the settings ask for (None: none). Both set is refused by the settings."""
        if allowed_recipients is not None:
            return cls(allowed=allowed_patterns(allowed_recipients))
        if redirect_to is not None:
            return cls(redirect_to=redirect_to)
        return None

    def describe(self) -> str:
        if self.redirect_to is not None:
            return f"{REDIRECT_SETTING}: every email goes to {self.redirect_to} alone"
        return f"{ALLOWED_SETTING}: only {', '.join(self.allowed)} may receive email; rows to anyone else fail"

    def apply(self, delivery: Delivery) -> Guarded:
        if self.redirect_to is not None:
            return self._redirect(delivery)
        recipients = (*delivery.to_addresses, *delivery.cc_addresses, *delivery.bcc_addresses)
        outside = list(dict.fromkeys(r for r in recipients if not self._allows(r)))
        if outside:
            shown = ", ".join(_shown(r) for r in outside)
            return Guarded(delivery, Outcome.unsendable(f"not in {ALLOWED_SETTING}: {shown}"), ())
        return Guarded(delivery, None, ())

    def _allows(self, raw: str) -> bool:
        try:
            address = mailbox_form(raw.strip())
        except CompositionError:
            return False
        domain = address.rsplit("@", 1)[1]
        return any(address == p or p == "@" + domain or (p.startswith("@*.") and domain.endswith(p[2:]))
                   for p in self.allowed)

    def _redirect(self, delivery: Delivery) -> Guarded:
        assert self.redirect_to is not None
        headers = {k: v for k, v in delivery.headers.items() if k.lower() != ORIGINAL_TO.lower()}
        originals = (*delivery.to_addresses, *delivery.cc_addresses)
        headers[ORIGINAL_TO] = ", ".join(originals)
        redirected = dataclasses.replace(delivery, to_addresses=(self.redirect_to,), cc_addresses=(),
                                         bcc_addresses=(), retry_recipients=None, headers=headers)
        notes = tuple(RefusedRecipient(_shown(b), None, f"redirected to {self.redirect_to} by {REDIRECT_SETTING}; "
                                       "a Bcc recipient, named in no header")
                      for b in delivery.bcc_addresses)
        return Guarded(redirected, None, notes)


def _shown(raw: str) -> str:
    try:
        return mailbox_form(raw.strip())
    except CompositionError:
        return raw
