"""Every provider whose webhooks the receiver takes, in one table.

Pure: importing this module opens no socket and reads no setting, so
:mod:`outbox_mailer.settings.events` builds the settings ``OUTBOX_MAILER_WEBHOOKS__<NAME>__*`` from
it, and the receiver (:mod:`outbox_mailer.receiver.server`) its routes ``POST /webhooks/<name>`` and
the check of each request; ``tests/unit/test_webhook_registry.py`` holds the docs' table of
providers to it.

Adding a provider: write one pure module in this package that verifies its requests and parses
them into :class:`~.model.ProviderEvent` values, with a class that satisfies
:class:`~.model.WebhookScheme` (its fields are its credentials, its ``name`` the provider's; its
``enabled`` says whether they are set, its ``received`` verifies a request with them and parses it),
and add the class to :data:`WEBHOOKS` below. Nothing else changes in the code: the settings accept
its credentials, the receiver serves its route. Its row goes into docs/delivery-events.md's table
and its settings into docs/configuration.md.
"""

from __future__ import annotations

from .mailgun import MailgunWebhook
from .model import WebhookScheme
from .postmark import PostmarkWebhook
from .resend import ResendWebhook
from .sendgrid import SendgridWebhook
from .ses import SesWebhook

__all__ = ["WEBHOOKS", "WEBHOOK_PROVIDERS"]

# In the order the docs list them (and the receiver logs the enabled ones).
WEBHOOKS: tuple[type[WebhookScheme], ...] = (ResendWebhook, PostmarkWebhook, SendgridWebhook, SesWebhook,
                                             MailgunWebhook)

WEBHOOK_PROVIDERS: dict[str, type[WebhookScheme]] = {scheme.name: scheme for scheme in WEBHOOKS}
