-- outbox-mailer schema, version 19: a recorded batch request can be rebuilt byte for byte.
--
-- A batch is recorded before its request so that a rescuer can resend the identical request under
-- its idempotency key (the provider absorbs an identical repeat and refuses another payload). The
-- request was built from each member's recipients as screened at that moment (suppressed addresses
-- left out), which a later look at the suppression list cannot tell: each member's screened To, Cc
-- and Bcc are recorded with the batch, in request order, and a SHA-256 digest of the request, so
-- that a replay rebuilds the same request and checks it before sending. Batches recorded before
-- this version have neither (null): their replay is built from the rows as stored.
-- email_batches is the daemon's own table; email_deliveries and its indexes are untouched.

ALTER TABLE email_batches
    ADD COLUMN recipients jsonb,      -- [[to, cc, bcc], ...] per member, in request order, as screened
    ADD COLUMN request_digest text;   -- hex SHA-256 of the request (method, URL, body)

COMMENT ON COLUMN email_batches.recipients IS
    'outbox-mailer: each member''s To, Cc and Bcc as the batch request carried them (suppressed addresses left out)';
COMMENT ON COLUMN email_batches.request_digest IS
    'outbox-mailer: SHA-256 of the batch request, checked before a rescuer resends it under the same key';
