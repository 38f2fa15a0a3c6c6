-- outbox-mailer schema, version 2.
-- When the first attempt started: providers remember an idempotency key for a
-- limited time from their first request (Resend: 24 h), so a resend after an
-- ambiguous outcome is only known to be absorbed inside that window.

ALTER TABLE email_deliveries ADD COLUMN first_attempt_at timestamptz;

COMMENT ON COLUMN email_deliveries.first_attempt_at IS
    'daemon-owned: when the first attempt was claimed (start of the provider''s idempotency-key window)';
