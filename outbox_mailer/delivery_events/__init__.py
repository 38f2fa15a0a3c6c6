"""What happens to an email after the first server accepted it: provider events and bounces.

Each provider's module (``resend``, ``postmark``, ``sendgrid``, ``ses``, ``mailgun``) verifies a
webhook request with the provider's own scheme over the raw body, before anything is parsed, and
turns an authentic body into :class:`~.model.ProviderEvent` values; ``dsn`` does the same for a
bounce message (RFC 3464) handed over by an MTA. None of them touches the database or the network
(SES's signing certificate is fetched by a function passed in): the receiver
(``outbox_mailer/receiver/server.py``) and ``ingest-dsn`` record what they return. ``webhooks``
lists the providers' webhook schemes: the one list of them.
"""
