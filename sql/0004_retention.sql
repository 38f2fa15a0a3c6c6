-- outbox-mailer schema, version 4: retention.
-- `outbox-mailer prune` scrubs the content of final rows after a while (the
-- row, its status and dedupe key stay answerable) and deletes them later.
-- Both walk partial indexes over final rows only, in small batches.

ALTER TABLE email_deliveries ADD COLUMN scrubbed_at timestamptz;

COMMENT ON COLUMN email_deliveries.scrubbed_at IS
    'daemon-owned: when prune removed the bodies, attachments and custom headers';

CREATE INDEX email_deliveries_unscrubbed_idx
    ON email_deliveries (updated_at)
    WHERE scrubbed_at IS NULL AND status IN ('sent', 'failed', 'cancelled');

CREATE INDEX email_deliveries_final_idx
    ON email_deliveries (updated_at)
    WHERE status IN ('sent', 'failed', 'cancelled');
