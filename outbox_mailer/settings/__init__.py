"""Settings: every OUTBOX_MAILER_* value, read and checked at start-up."""
