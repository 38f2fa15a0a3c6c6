"""Events into the database, the same way from a webhook and from a bounce on stdin.

Each event is matched to its row and written once (``EventStore.record``). A hard bounce or a
complaint suppresses its recipient when ``OUTBOX_MAILER_SUPPRESSION__AUTOMATIC`` is on (the
default); soft and undetermined bounces, delays and unsubscribes never do. A bounce that came as a
DSN (provider ``smtp``) counts (suppresses, sets ``delivery_event``) only when it matched one of
our rows and names one of that row's recipients: anyone can mail the bounce address, quoting the
Message-ID of an email they received.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from .delivery_events.model import BounceClass, Kind, ProviderEvent, storable
from .store import EventStore
from .suppression import normal_address

log = logging.getLogger("outbox_mailer")


@dataclass
class Intake:
    recorded: int = 0
    duplicates: int = 0  # written before (a provider's retry)
    unmatched: int = 0  # new, but no row of ours


def suppression_for(event: ProviderEvent, automatic: bool) -> str | None:
    """The reason this event suppresses its recipient for, or None."""
    if not automatic:
        return None
    if event.kind is Kind.BOUNCED and event.bounce_class is BounceClass.HARD:
        return "hard_bounce"
    if event.kind is Kind.COMPLAINED:
        return "complaint"
    return None


def _normal_recipient(event: ProviderEvent) -> str | None:
    if event.recipient is None:
        return None
    try:
        return normal_address(event.recipient)
    except ValueError:
        log.warning("%s event %s: recipient %r is not an address; nothing suppressed", event.provider,
                    event.provider_event_id, event.recipient)
        return None


async def take_in(store: EventStore, events: Sequence[ProviderEvent], *, automatic: bool) -> Intake:
    """Record every event (a DatabaseError is raised: the caller answers 503 or exits 75)."""
    intake = Intake()
    for event in map(storable, events):
        recipient = _normal_recipient(event)
        reason = suppression_for(event, automatic) if recipient is not None else None
        delivery_id, new = await store.record(event, recipient, reason)
        if not new:
            intake.duplicates += 1
            continue
        intake.recorded += 1
        if delivery_id is None:
            intake.unmatched += 1
        log.info("event provider=%s kind=%s%s recipient=%s row=%s", event.provider, event.kind.value,
                 f"/{event.bounce_class.value}" if event.bounce_class else "", event.recipient,
                 delivery_id if delivery_id is not None else "unmatched")
    return intake
