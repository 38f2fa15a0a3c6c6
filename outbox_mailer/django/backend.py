"""Django's email backend that writes each message as a row of ``email_deliveries`` (docs/django.md).

The rows are written through Django's own connection to the database alias the setting
``OUTBOX_MAILER_DATABASE`` names (``default`` when unset), so they belong to the transaction the caller is
in: a ``send_mail()`` inside ``transaction.atomic()`` is sent only if that block commits. Each message is
written in a savepoint of its own (``atomic(savepoint=True)``): a message refused (by the conversion, or by
the table's checks at the INSERT) rolls back to that savepoint only, and the caller's transaction stays
usable.

``send_messages`` answers how many messages the outbox now holds: a message whose ``Outbox-Dedupe-Key``
was already there counts (the email under that key is sent once, whichever call wrote it). A message
without recipients is skipped and not counted, as Django's SMTP backend does. ``fail_silently`` keeps
Django's meaning: a refused message is left out of the count instead of raising.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.mail import EmailMessage
from django.core.mail.backends.base import BaseEmailBackend
from django.db import DatabaseError, connections, transaction
from django.utils.connection import ConnectionDoesNotExist

from ..client import InvalidEmail, enqueue
from .conversion import email_from_message

__all__ = ["DATABASE_SETTING", "EmailBackend"]

DATABASE_SETTING = "OUTBOX_MAILER_DATABASE"


class EmailBackend(BaseEmailBackend):
    """``EMAIL_BACKEND = "outbox_mailer.django.EmailBackend"``: messages become outbox rows."""

    def __init__(self, fail_silently: bool = False, **kwargs: Any) -> None:
        super().__init__(fail_silently=fail_silently, **kwargs)
        self.alias: str = getattr(settings, DATABASE_SETTING, "default")
        try:
            vendor = connections[self.alias].vendor
        except ConnectionDoesNotExist as exc:
            raise ImproperlyConfigured(f"{DATABASE_SETTING} = {self.alias!r} is not in DATABASES") from exc
        if vendor != "postgresql":
            raise ImproperlyConfigured(f"{DATABASE_SETTING} = {self.alias!r} is a {vendor} database: "
                                       "outbox-mailer's table lives in PostgreSQL")

    def send_messages(self, email_messages: Sequence[EmailMessage]) -> int:
        """Write each message with recipients as a row, each in its own savepoint; how many the outbox holds."""
        written = 0
        for message in email_messages:
            if not message.recipients():
                continue
            try:
                self._write(message)
            except (InvalidEmail, DatabaseError):
                if not self.fail_silently:
                    raise
            else:
                written += 1
        return written

    def _write(self, message: EmailMessage) -> bool:
        """True: a new row; False: the message's key was already in the table."""
        email = email_from_message(message)
        connection = connections[self.alias]
        # the driver's own cursor (psycopg 3 or psycopg2) under Django's wrapper, in Django's transaction; the
        # driver's errors become Django's (IntegrityError ...), as on Django's own cursor
        with (transaction.atomic(using=self.alias, savepoint=True), connection.cursor() as cursor,
              connection.wrap_database_errors):
            return enqueue(cursor.cursor, email)
