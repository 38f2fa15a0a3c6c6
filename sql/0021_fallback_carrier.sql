-- outbox-mailer schema, version 21: a claim sent through a fallback says so before the send.
--
-- The claim routes a row to its transport's fallback while that transport is closed (failover.py);
-- a daemon that died during such a send left a claim whose outcome is unknown, and the rescuer
-- recorded that unknown attempt under the row's own transport. The pin rule (a resend after an
-- unknown outcome goes to the transport of that attempt) then sent the repeat to the primary,
-- which never had the message: both servers received it.
--
-- Before a send through any transport other than the row's own (or the one it is pinned to),
-- the daemon now writes that transport into the row's queue entry, fenced on the claim; if the
-- write fails, the row is held back, never sent unrecorded. The rescuer reads it
-- (find_dead_claims) and records the unknown attempt under it, so that a resend goes back there
-- and that transport's idempotency window applies. The carrier is kept with the claim token it
-- belongs to and read only for that claim, so the claim and the outcome write (the hot path) never
-- touch these columns.
--
-- On email_queue, not email_deliveries (the hot-path rule); no index: they are read only with the
-- row the rescuer already found. Nullable columns without a default: no table rewrite.

ALTER TABLE email_queue
    ADD COLUMN carrier text,              -- null: the row's own transport (or the one it is pinned to)
    ADD COLUMN carrier_claim_token uuid;  -- the claim (email_deliveries.claim_token) carrier belongs to

COMMENT ON COLUMN email_queue.carrier IS
    'outbox-mailer (daemon-owned): the transport a claim was sent through when not the row''s own, written before the send; valid for the claim carrier_claim_token only.';
