"""Django's email backend for outbox-mailer (docs/django.md)::

    # settings.py
    EMAIL_BACKEND = "outbox_mailer.django.EmailBackend"
    OUTBOX_MAILER_DATABASE = "default"  # the alias whose transactions govern the emails (default: "default")

Every message of ``send_mail``, ``send_mass_mail``, ``EmailMessage`` and ``EmailMultiAlternatives`` becomes a
row of ``email_deliveries`` through Django's own connection, so ``transaction.atomic()`` decides whether it is
sent. The header ``Outbox-Dedupe-Key`` gives its dedupe key (and is not sent); without it a new random key is
made for each message. This package imports Django and :mod:`outbox_mailer.client` only: nothing of the daemon.
"""

from __future__ import annotations

from .backend import DATABASE_SETTING, EmailBackend
from .conversion import DEDUPE_KEY_HEADER, OUTBOX_HEADERS, email_from_message

__all__ = ["DATABASE_SETTING", "DEDUPE_KEY_HEADER", "OUTBOX_HEADERS", "EmailBackend", "email_from_message"]
