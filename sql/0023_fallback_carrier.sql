-- outbox-mailer schema, version 23: a claim sent through a fallback says so before the send.
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
-- and that transport's idempotency window applies. Each claim starts without one (claim_due).
--
-- On email_queue, not email_deliveries (the hot-path rule); no index: it is read only with the
-- row the rescuer already found. A nullable column without a default: no table rewrite.

ALTER TABLE email_queue ADD COLUMN carrier text;  -- null: the row's own transport (or its pinned one)

COMMENT ON COLUMN email_queue.carrier IS
    'outbox-mailer (daemon-owned): the fallback transport the current claim is sent through, written before the send; null: the row''s own.';
