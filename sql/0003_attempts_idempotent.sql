-- outbox-mailer schema, version 3.
-- One attempt is one row even if its outcome is written twice: when a COMMIT
-- succeeds but its reply is lost with the connection, the daemon writes the
-- batch again; the fence keeps the row's state right and this keeps the
-- attempt history free of duplicates.

CREATE UNIQUE INDEX email_delivery_attempts_once_idx
    ON email_delivery_attempts (delivery_id, attempt, started_at);
