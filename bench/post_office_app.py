"""django-post_office's side of the drain comparison: the Django settings, and the application that queues.

This module is the Django settings module of post_office_drain.py's processes (DJANGO_SETTINGS_MODULE,
configured from the environment: ``OUTBOX_BENCH_PO_DATABASE``, a postgresql:// URL of the database
kept for django-post_office's tables, and ``OUTBOX_BENCH_PO_SMTP_PORT``, smtp-sink's port), so that
``python -m django migrate`` and ``python -m django send_queued_mail`` run as a user runs them.
Everything else is django-post_office's default (BATCH_SIZE, THREADS_PER_PROCESS, LOG_LEVEL, ...).

Run as a script, it is the application:

    python bench/post_office_app.py FIRST N

It renders the receipts FIRST .. FIRST + N - 1 (receipts.py), opens its database connection and
prints ``READY``; on a line on stdin it queues each with ``post_office.mail.send`` in its own
transaction (autocommit: one email per web request, the connection kept as a pooled app keeps it)
and prints ``DONE``.
"""

from __future__ import annotations

import os
import sys
from urllib.parse import unquote, urlsplit

_url = urlsplit(os.environ.get("OUTBOX_BENCH_PO_DATABASE", "postgresql://127.0.0.1/post_office"))

SECRET_KEY = "bench-only"  # a throwaway cluster on loopback
USE_TZ = True
INSTALLED_APPS = ["post_office"]
# mail.send renders subject and bodies as Django templates (with an empty context, when no template is given)
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True}]
DATABASES = {"default": {
    "ENGINE": "django.db.backends.postgresql", "NAME": _url.path.lstrip("/"), "HOST": _url.hostname or "",
    "PORT": str(_url.port or ""), "USER": unquote(_url.username or ""), "PASSWORD": unquote(_url.password or ""),
}}
EMAIL_HOST = "127.0.0.1"
EMAIL_PORT = int(os.environ.get("OUTBOX_BENCH_PO_SMTP_PORT", "25"))
DEFAULT_FROM_EMAIL = "Example Shop <noreply@example.com>"  # common.DEFAULT_FROM, as our daemon sends
POST_OFFICE = {"BACKENDS": {"default": "django.core.mail.backends.smtp.EmailBackend"}}


def main(first: int, n: int) -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "post_office_app")
    django.setup()
    from django.db import connection
    from post_office import mail

    import receipts

    emails = [receipts.receipt(i) for i in range(first, first + n)]  # rendered before the measurement
    connection.ensure_connection()
    print("READY", flush=True)
    sys.stdin.readline()
    for r in emails:
        mail.send(recipients=[r["to"]], sender=DEFAULT_FROM_EMAIL, subject=r["subject"], message=r["text"],
                  html_message=r["html"], priority="medium")
    print("DONE", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
