"""A claimed row made ready to send: its stored template rendered, screened for suppressions, given its
unsubscribe link (a row naming an ``unsubscribe_category``: delivery_events/unsubscribe.py), held by the
staging guard, composed.

A row that names a template (docs/templates.md) is rendered first, into the subject and bodies that
composition receives: its version (by the name, locale and version its INSERT recorded) comes from
:class:`~outbox_mailer.store.templates.TemplateSources`, and the render runs in a worker process under the
settings' limits (``templating/worker.py``). A render that fails (an undefined variable, a limit hit, the
sandbox's refusal) fails the row permanently, without a network call; the rendered Subject is then checked by
composition like any other.

A row that names a provider's own template (``provider_template``) is rendered by the provider: only a transport
whose kind renders provider templates (``providers/registry.py``) may carry it, and any other fails it permanently
here, naming the transport, without a network call. It is composed with an empty subject and text (its addresses,
headers and attachments checked like any row's); the provider module sends the template's name and model instead.

The recipients left out on the way (suppressed, a Bcc redirected) are kept by row id until the
executor writes them on the attempt (:attr:`Preparation.dropped`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime

from ..delivery import ComposedMessage, Delivery, Outcome, RefusedRecipient
from ..delivery_events.suppression import screen
from ..delivery_events.unsubscribe import without_links
from ..errors import CompositionError, DatabaseError, TemplateError
from ..message.compose import compose
from ..message.staging import StagingGuard
from ..providers.registry import PROVIDER_TEMPLATE_KINDS, renders_provider_templates
from ..settings.config import Settings
from ..store.templates import TemplateSources
from ..templating.worker import render_isolated

__all__ = ["Preparation"]


class Preparation:
    def __init__(self, settings: Settings, templates: TemplateSources | None = None,
                 kinds: Mapping[str, str] | None = None) -> None:
        self.settings = settings
        self.templates = templates
        self.kinds = kinds or {}  # transport name -> its kind
        self.limits = settings.render_limits()
        self.address_policy = settings.address_policy()  # made once: composition asks for it with every row
        self.guard = StagingGuard.of(settings.allowed_recipients, settings.redirect_to)
        links = settings.unsubscribe.links()
        self.linked = links.added if links is not None else without_links  # List-Unsubscribe, or a refusal
        self.dropped: dict[int, tuple[RefusedRecipient, ...]] = {}  # recipients left out (suppressed, a Bcc redirected)

    async def message(self, delivery: Delivery, now: datetime, transport: str) -> ComposedMessage | Outcome:
        prepared = await self.screened(delivery, now, transport)
        return prepared if isinstance(prepared, Outcome) else prepared[1]

    async def screened(self, delivery: Delivery, now: datetime,
                       transport: str) -> tuple[Delivery, ComposedMessage] | Outcome:
        """The row as screened for suppressions (what a batch records) and its message to send through
        ``transport``, or why not."""
        if delivery.expires_at is not None and delivery.expires_at <= now:
            return Outcome.unsendable(f"expired at {delivery.expires_at.isoformat()} before it could be sent")
        if delivery.provider_template is not None and not renders_provider_templates(self.kinds.get(transport, "")):
            return Outcome.unsendable(
                f"provider template: transport {transport!r} ({self.kinds.get(transport, 'not configured')}) cannot "
                f"render a provider's template ({', '.join(PROVIDER_TEMPLATE_KINDS)} can)")
        rendered = await self.rendered(delivery)
        if isinstance(rendered, Outcome):
            return rendered
        screened = screen(rendered)
        if screened.refusal is not None:
            return screened.refusal
        linked = self.linked(screened.delivery, now)
        if isinstance(linked, Outcome):
            return linked
        if screened.dropped:
            self.dropped[delivery.id] = screened.dropped
        message = self._guarded_and_composed(linked, now)
        return message if isinstance(message, Outcome) else (screened.delivery, message)

    async def rebuilt(self, delivery: Delivery, now: datetime) -> ComposedMessage | Outcome:
        """A row's message built again as :meth:`screened` built it, for a recorded batch's resend: its
        recorded version rendered, its unsubscribe link, the staging guard, composed; not screened again
        (the batch carries the recipients it recorded)."""
        rendered = await self.rendered(delivery)
        linked = rendered if isinstance(rendered, Outcome) else self.linked(rendered, now)
        return linked if isinstance(linked, Outcome) else self._guarded_and_composed(linked, now)

    def _guarded_and_composed(self, delivery: Delivery, now: datetime) -> ComposedMessage | Outcome:
        guarded = self.guarded(delivery)  # never past the staging guard
        return guarded if isinstance(guarded, Outcome) else self.composed(guarded, now)

    async def rendered(self, delivery: Delivery) -> Delivery | Outcome:
        """The row with its template's version rendered into its subject and bodies (a row of its own content
        as it is), or why not: a permanent failure, or the database away (the claim goes back, uncharged)."""
        if delivery.provider_template is not None:  # rendered by the provider
            return dataclasses.replace(delivery, subject="", text_body="", html_body=None)
        ref = delivery.template
        if ref is None:
            return delivery
        if self.templates is None:
            return Outcome.unsendable("template: this daemon reads no stored templates")
        try:
            version = await self.templates.get(ref.name, ref.locale, ref.version)
        except DatabaseError as exc:
            return Outcome.held_back(f"template: could not read {ref.name} version {ref.version}: {exc}")
        if version is None:
            return Outcome.unsendable(f"template: {ref.name!r} has no version {ref.version} in locale {ref.locale}")
        try:
            parts = await render_isolated(version, ref.data, self.limits)
        except TemplateError as exc:
            return Outcome.unsendable(f"{exc.reason} ({version.describe()})")
        return dataclasses.replace(delivery, subject=parts.subject, text_body=parts.text_body,
                                   html_body=parts.html_body)

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
                address_policy=self.address_policy,
            )
        except CompositionError as exc:
            return Outcome.unsendable(f"cannot compose: {exc}")
