-- outbox-mailer schema, version 10: the Message-ID is written by the first claim.
--
-- 1. The daemon's claim now computes each row's Message-ID and writes it to
--    email_deliveries.message_id before anything is sent (outbox_mailer/message_ids.py), where
--    schema 9's daemon wrote it with the first outcome. Its form gains the claim's time in front,
--    so that the attempt rows' message_id index grows at its right-hand edge. Nothing here
--    changes a row: the column's comment says what it now holds, and a daemon of this version
--    refuses to start on schema 9, so every new claim writes the new form.
-- 2. prune forgets Mailgun webhook tokens a day after they were seen (a request signed that long
--    ago is refused by its timestamp anyway): an index on seen_at serves it.

COMMENT ON COLUMN email_deliveries.message_id IS
    'The Message-ID header the daemon sends, written by the first claim';

CREATE INDEX email_webhook_tokens_seen_idx ON email_webhook_tokens (seen_at);
