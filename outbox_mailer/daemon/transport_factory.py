"""Build every configured transport: ``smtp`` and each ``OUTBOX_MAILER_TRANSPORTS__<NAME>``.

The SMTP kind becomes an :class:`~outbox_mailer.transports.smtp.SmtpTransport`; every provider kind of
:mod:`outbox_mailer.providers.registry` an :class:`~outbox_mailer.transports.api.http.HttpApiTransport` that
sends through its provider module. With ``OUTBOX_MAILER_DKIM__*`` set, every SMTP transport signs with
the one :class:`~outbox_mailer.message.dkim_signing.DkimSigner`; the provider APIs take
fields, not a message, and sign with the account's own keys.
"""

from __future__ import annotations

from ..delivery import Transport
from ..message.addresses import parse_address
from ..message.dkim_signing import DkimSigner
from ..settings.config import Settings
from ..settings.transports import SmtpTransportSettings
from ..transports.api.http import HttpApiTransport
from ..transports.smtp import SmtpTransport

__all__ = ["build_transports", "probe_sender"]


def probe_sender(settings: Settings) -> str | None:
    """The envelope sender `check` probes an SMTP relay with: the default sender's address."""
    return None if settings.default_from is None else parse_address(
        settings.default_from, "default_from", settings.address_policy()).addr_spec


def build_transports(settings: Settings) -> dict[str, Transport]:
    """Every configured transport by name: ``smtp`` and each ``OUTBOX_MAILER_TRANSPORTS__<NAME>``."""
    sender = probe_sender(settings)
    signer = DkimSigner.of(settings.dkim, max_message_bytes=settings.max_message_bytes)
    tags, each = settings.bounces.tags(), settings.bounces.per_recipient
    transports: dict[str, Transport] = {"smtp": SmtpTransport(settings.smtp, probe_sender=sender, signer=signer,
                                                              bounces=tags, per_recipient=each)}
    for name, config in settings.transports.items():
        if isinstance(config, SmtpTransportSettings):
            transports[name] = SmtpTransport(config, name=name, probe_sender=sender, signer=signer, bounces=tags,
                                             per_recipient=each)
        else:
            transports[name] = HttpApiTransport(config, name=name)
    return transports
