"""Events into the database, the same way from a webhook and from a bounce on stdin.

Each event is matched to its row and written once (``EventStore.record``). A hard bounce or a
complaint suppresses its recipient when ``OUTBOX_MAILER_SUPPRESSION__AUTOMATIC`` is on (the
default); soft and undetermined bounces, delays and unsubscribes never do.

An event dated more than :data:`MAX_FUTURE_SKEW` after ``now`` is refused (not written): it would
stay the row's latest ``delivery_event`` for good. One rule for every provider and for DSNs.

A bounce that came by mail (provider ``smtp``) is believed (suppresses, sets ``delivery_event``)
only when it proves we sent that email to that recipient: anyone can mail the bounce address,
quoting the Message-ID and the To and Cc of an email they received. What proves it:

* the tag of the envelope recipient it was delivered to (bounce_tags.py) names the row and the
  recipient (a per-recipient transaction), and the bounce names that recipient;
* without a recipient's tag (none, or one for the whole message), the row has a single recipient
  and the bounce names it: nobody else could have been meant.

With tracing on (``tracing``: docs/tracing.md), each new event recorded for a row continues the row's trace
with a span.

A bounce about a row with several recipients and no recipient's tag is recorded on the row, for an
operator to judge in the console, and suppresses nobody. A tag that does not verify (forged, or
older than its window) makes the bounce prove nothing at all.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..delivery_events.bounce_tags import BounceTag, Unproven
from ..delivery_events.model import ProviderEvent, storable
from ..delivery_events.suppression import normal_address, suppression_for
from ..store import EventStore
from ..tracing.spans import Tracing

log = logging.getLogger("outbox_mailer")

MAX_FUTURE_SKEW = timedelta(minutes=15)  # clocks of providers and MTAs may run this far ahead of ours


@dataclass
class Intake:
    recorded: int = 0
    duplicates: int = 0  # written before (a provider's retry)
    unmatched: int = 0  # new, but no row of ours
    refused: int = 0  # dated in the future: not written


def _normal_recipient(event: ProviderEvent) -> str | None:
    if event.recipient is None:
        return None
    try:
        return normal_address(event.recipient)
    except ValueError:
        log.warning("%s event %s: recipient %r is not an address; nothing suppressed", event.provider,
                    event.provider_event_id, event.recipient)
        return None


async def take_in(store: EventStore, events: Sequence[ProviderEvent], *, automatic: bool, now: datetime,
                  proof: BounceTag | Unproven = Unproven.UNTAGGED, tracing: Tracing | None = None) -> Intake:
    """Record every event (a DatabaseError is raised: the caller answers 503 or exits 75).
    ``proof``: what the envelope recipient of a bounce by mail proves (``ingest-dsn``)."""
    intake = Intake()
    for event in map(storable, events):
        if event.occurred_at is not None and event.occurred_at > now + MAX_FUTURE_SKEW:
            intake.refused += 1
            log.warning("%s event %s refused: dated %s, in the future", event.provider, event.provider_event_id,
                        event.occurred_at.isoformat())
            continue
        recipient = _normal_recipient(event)
        reason = suppression_for(event.kind, event.bounce_class, automatic) if recipient is not None else None
        delivery_id, new = await store.record(event, recipient, reason, proof=proof)
        if not new:
            intake.duplicates += 1
            continue
        intake.recorded += 1
        if delivery_id is None:
            intake.unmatched += 1
        elif tracing is not None:
            await _trace(store, tracing, event, delivery_id)
        log.info("event provider=%s kind=%s%s recipient=%s row=%s", event.provider, event.kind.value,
                 f"/{event.bounce_class.value}" if event.bounce_class else "", event.recipient,
                 delivery_id if delivery_id is not None else "unmatched")
    return intake


async def _trace(store: EventStore, tracing: Tracing, event: ProviderEvent, delivery_id: int) -> None:
    """The event's span in its row's trace (a row deleted since it was matched has none)."""
    row = await store.trace_of(delivery_id)
    if row is not None:
        tracing.event(row[1], provider=event.provider, kind=event.kind.value, dedupe_key=row[0],
                      message_id=event.message_id or event.provider_message_id,
                      bounce_class=event.bounce_class.value if event.bounce_class is not None else None)
