"""Transports: the edges that hand a composed message to the outside world.

Each transport module is the only importer of its client library and
implements :class:`outbox_mailer.delivery.Transport`:

* :mod:`outbox_mailer.transports.smtp` – SMTP over a pool of persistent
  aiosmtplib connections.
"""
