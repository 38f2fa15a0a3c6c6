"""A claimed row made ready to send: screened for suppressions, given its unsubscribe link (a row naming
an ``unsubscribe_category``: delivery_events/unsubscribe.py), held by the staging guard, composed.

The recipients left out on the way (suppressed, a Bcc redirected) are kept by row id until the
executor writes them on the attempt (:attr:`Preparation.dropped`).
"""

from __future__ import annotations

from datetime import datetime

from ..delivery import ComposedMessage, Delivery, Outcome, RefusedRecipient
from ..delivery_events.suppression import screen
from ..delivery_events.unsubscribe import without_links
from ..errors import CompositionError
from ..message.compose import compose
from ..message.staging import StagingGuard
from ..settings.config import Settings

__all__ = ["Preparation"]


class Preparation:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.guard = StagingGuard.of(settings.allowed_recipients, settings.redirect_to)
        links = settings.unsubscribe.links()
        self.linked = links.added if links is not None else without_links  # List-Unsubscribe, or a refusal
        self.dropped: dict[int, tuple[RefusedRecipient, ...]] = {}  # recipients left out (suppressed, a Bcc redirected)

    def message(self, delivery: Delivery, now: datetime) -> ComposedMessage | Outcome:
        prepared = self.screened(delivery, now)
        return prepared if isinstance(prepared, Outcome) else prepared[1]

    def screened(self, delivery: Delivery, now: datetime) -> tuple[Delivery, ComposedMessage] | Outcome:
        """The row as screened for suppressions (what a batch records) and its message, or why not."""
        if delivery.expires_at is not None and delivery.expires_at <= now:
            return Outcome.unsendable(f"expired at {delivery.expires_at.isoformat()} before it could be sent")
        screened = screen(delivery)
        if screened.refusal is not None:
            return screened.refusal
        linked = self.linked(screened.delivery, now)
        if isinstance(linked, Outcome):
            return linked
        if screened.dropped:
            self.dropped[delivery.id] = screened.dropped
        guarded = self.guarded(linked)
        message = guarded if isinstance(guarded, Outcome) else self.composed(guarded, now)
        return message if isinstance(message, Outcome) else (screened.delivery, message)

    def guarded(self, delivery: Delivery) -> Delivery | Outcome:
        """The row as the staging guard lets it go (only allowed recipients, or redirected), or why not."""
        if self.guard is None:
            return delivery
        guarded = self.guard.apply(delivery)
        if guarded.refusal is not None:
            return guarded.refusal
        if guarded.notes:
            self.dropped[delivery.id] = self.dropped.get(delivery.id, ()) + guarded.notes
        return guarded.delivery

    def composed(self, delivery: Delivery, now: datetime) -> ComposedMessage | Outcome:
        try:
            return compose(
                delivery,
                default_from=self.settings.default_from,
                max_message_bytes=self.settings.max_message_bytes,
                now=now,
                text_alternative=self.settings.text_alternative,
                address_policy=self.settings.address_policy(),
            )
        except CompositionError as exc:
            return Outcome.unsendable(f"cannot compose: {exc}")
