"""Every transport kind, in one table: ``smtp`` and one entry per provider API.

Plain data and pure classes: importing this module imports no client library and
no settings, so :mod:`outbox_mailer.settings.config` builds its settings from it (the
``kind`` values of ``OUTBOX_MAILER_TRANSPORTS__<NAME>__KIND``, each provider's
default base URL and rate, whether it needs ``api_key`` or ``url``), and
:mod:`outbox_mailer.daemon.transport_factory` builds transports from it.

Adding a provider: write one pure module in this package (:mod:`outbox_mailer.providers`)
with a class that satisfies :class:`~outbox_mailer.providers.provider.Provider`
(its class attributes are its settings: ``kind``, ``default_base_url``,
``default_rate_per_second``, ``idempotency_window_seconds``; with a batch endpoint
also ``batch_limit`` and the methods of
:class:`~outbox_mailer.providers.batches.BatchProvider`), and add the class
to :data:`PROVIDERS` below. Nothing else changes: the settings accept the new
kind, the HTTP edge sends through it, and the transport contract suite
(``tests/integration/test_transport_contract.py``) lists it.
"""

from __future__ import annotations

from .postmark import PostmarkApi
from .provider import Provider
from .resend import ResendApi
from .sendgrid import SendGridApi
from .webhook import WebhookApi

__all__ = ["API_PROVIDERS", "BATCH_KINDS", "PROVIDERS", "PROVIDER_TEMPLATE_KINDS", "SMTP_KIND", "TRANSPORT_KINDS",
           "has_batch_endpoint", "in_house", "renders_provider_templates"]

SMTP_KIND = "smtp"  # OUTBOX_MAILER_SMTP__* and TRANSPORTS__<NAME>__KIND=smtp: the SMTP transport

# One entry per provider HTTP API (kind=http is an in-house API of the user's own).
PROVIDERS: tuple[type[Provider], ...] = (ResendApi, PostmarkApi, SendGridApi, WebhookApi)

API_PROVIDERS: dict[str, type[Provider]] = {provider.kind: provider for provider in PROVIDERS}
TRANSPORT_KINDS: tuple[str, ...] = (SMTP_KIND, *API_PROVIDERS)


def has_batch_endpoint(kind: str) -> bool:
    """The provider sends many emails per request (its class has a ``batch_limit``): resend, postmark."""
    provider = API_PROVIDERS.get(kind)
    return provider is not None and getattr(provider, "batch_limit", 0) > 0


BATCH_KINDS: tuple[str, ...] = tuple(kind for kind in API_PROVIDERS if has_batch_endpoint(kind))

# The kinds that render a template kept at the provider (a row's provider_template, docs/templates.md): their
# provider module builds the provider's template fields. Any other transport refuses such a row, and failover
# never hands one to another transport.
PROVIDER_TEMPLATE_KINDS: tuple[str, ...] = (PostmarkApi.kind, SendGridApi.kind)


def renders_provider_templates(kind: str) -> bool:
    """A transport of this kind sends a row naming a provider's template in that provider's fields."""
    return kind in PROVIDER_TEMPLATE_KINDS


def in_house(kind: str) -> bool:
    """The API is the user's own (no public endpoint): configured by ``url``, ``api_key`` optional."""
    return API_PROVIDERS[kind].default_base_url is None
