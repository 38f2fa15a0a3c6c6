"""Suppressed addresses: their one normal form, and what a claimed row's suppressed recipients mean.

The form is the envelope's (:func:`outbox_mailer.message.addresses.mailbox_form`): the address RCPT TO
carries, its domain folded by IDNA into ASCII (``zoe@\uff45xample.com``, ``zoe@example\u3002com``
and ``zoe@example.com`` are one mailbox, ``zoë@EXÄMPLE.com`` is ``zoë@xn--exmple-cua.com``), the
ASCII letters of its local part in lower case. It is computed in Python only (SQL cannot: NFKC
leaves U+3002 alone, and lower() follows the database's locale); every writer of
``email_suppressions`` stores it, and the daemon compares the claimed rows' recipients in it with
one look-up per claimed batch (:func:`addresses_to_check`, the store's ``suppressions_among``).

A suppression has a scope: '' for all mail (hard bounces, complaints, an operator's), or a category, which
holds back only the rows naming that ``unsubscribe_category`` (a one-click unsubscribe, docs/unsubscribe.md):
a password reset still reaches a user who left the newsletter.

A row whose every recipient is suppressed fails without a network call, ``last_error``
starting with ``suppressed:``; otherwise its suppressed recipients are left out of the message
(its To, Cc and Bcc, so no transport sends to them) and written on the attempt. A row with
``ignore_suppressions`` is never screened (the claim says so, and nothing is looked up for it).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..delivery import Delivery, Outcome, RefusedRecipient, quick_init
from ..errors import CompositionError
from ..message.addresses import mailbox_form
from .bounce_tags import BounceTag, Unproven
from .model import BounceClass, Kind

_IN_BRACKETS = re.compile(r"<([^<>]*)>\s*$")
REASONS = ("hard_bounce", "complaint", "unsubscribe", "manual")
SUPPRESSED = "suppressed: "  # how last_error starts for a row failed because every recipient is suppressed


def normal_address(raw: str) -> str:
    """The suppression form of an address as a row, an event or an operator gives it.
    ValueError when it is not an address."""
    try:
        return mailbox_form(raw.strip())
    except CompositionError as exc:
        raise ValueError(f"not an email address: {raw!r} ({exc.reason})") from None


def form_or_none(raw: str) -> str | None:
    """:func:`normal_address`, or None for what is not an address (such a row fails when composed)."""
    try:
        return normal_address(raw)
    except ValueError:
        return None


def suppression_for(kind: Kind, bounce_class: BounceClass | None, automatic: bool) -> str | None:
    """The reason an event of this kind suppresses its recipient for, or None: a hard bounce or a
    complaint, when ``OUTBOX_MAILER_SUPPRESSION__AUTOMATIC`` is on."""
    if not automatic:
        return None
    if kind is Kind.BOUNCED and bounce_class is BounceClass.HARD:
        return "hard_bounce"
    if kind is Kind.COMPLAINED:
        return "complaint"
    return None


def event_counts(provider: str, delivery_id: int | None, address: str | None, recipients: Sequence[str],
                 proof: BounceTag | Unproven = Unproven.UNTAGGED) -> bool:
    """Whether an event suppresses and sets its row's delivery_event (the trust model of
    receiver/intake.py): a provider's (its webhook is authenticated) always; a bounce by mail (provider
    ``smtp``) only when it proves we sent that row to ``address``: the envelope recipient's tag
    (``proof``) names that recipient, or, without a recipient's tag, ``address`` is the row's only
    recipient (anyone who got one of our emails could quote its Message-ID, To and Cc). A tag that
    does not verify proves nothing."""
    if provider != "smtp":
        return True
    if delivery_id is None or address is None or proof is Unproven.FORGED:
        return False
    if isinstance(proof, BounceTag) and proof.index > 0:
        return proof.index <= len(recipients) and form_or_none(recipients[proof.index - 1]) == address
    return {form_or_none(r) for r in recipients} == {address}


def _recipients(delivery: Delivery) -> tuple[str, ...]:
    return (*delivery.to_addresses, *delivery.cc_addresses, *delivery.bcc_addresses)


def addresses_to_check(deliveries: Iterable[Delivery]) -> list[str]:
    """The normal forms of these claimed rows' recipients, each once: one look-up for the batch."""
    return sorted({f for d in deliveries for r in _recipients(d) if (f := form_or_none(r)) is not None})


def categories_to_check(deliveries: Iterable[Delivery]) -> list[str]:
    """The unsubscribe categories these claimed rows name, each once: the look-up's other half."""
    return sorted({d.unsubscribe_category for d in deliveries if d.unsubscribe_category is not None})


def with_suppressed(deliveries: Sequence[Delivery], found: Iterable[tuple[str, str, str]]) -> list[Delivery]:
    """Each row with its recipients found suppressed in ``delivery.suppressed``. ``found``: (normal form,
    scope, 'address reason YYYY-MM-DD'), as the look-up returns them; a scope other than '' counts only
    for a row of that category."""
    by_scope: dict[str, dict[str, str]] = {}
    for address, scope, noted in found:
        by_scope.setdefault(scope, {})[address] = noted
    every, out = by_scope.get("", {}), []
    for d in deliveries:
        category = by_scope.get(d.unsubscribe_category, {}) if d.unsubscribe_category is not None else {}
        forms = [f for f in map(form_or_none, _recipients(d)) if f is not None]
        hits = dict.fromkeys(every.get(f) or category[f] for f in forms if f in every or f in category)
        out.append(dataclasses.replace(d, suppressed=tuple(hits)) if hits else d)
    return out


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


@quick_init
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
    candidates = owed if owed is not None else _recipients(delivery)
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
        return Screened(delivery, Outcome.suppressed(SUPPRESSED + text), ())
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
    return _found(_by_key(delivery), _recipients(delivery))


def _by_key(delivery: Delivery) -> dict[str, Suppressed]:
    return {s.address: s for s in map(Suppressed.parse, delivery.suppressed)}


def _found(by_key: dict[str, Suppressed], candidates: Iterable[str]) -> list[Suppressed]:
    return list({hit.address: hit for raw in candidates if (hit := by_key.get(_key(raw)))}.values())


def _key(raw: str) -> str:
    return form_or_none(raw) or raw


def _addr_spec(raw: str) -> str:
    m = _IN_BRACKETS.search(raw)
    return (m.group(1) if m else raw).strip()
