-- Enqueue one email inside your own transaction, commit, then read its status.
--
--   psql "$DATABASE_URL" -X -q -v key=order-42 -v to=alice@example.com -f examples/sql/enqueue.sql
--
-- :'key' and :'to' are psql variables, quoted by psql as SQL literals.
\set ON_ERROR_STOP on

BEGIN;
-- ... your own writes go here, in the same transaction ...
INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body)
VALUES (:'key', ARRAY[:'to'], 'Your order', 'Thank you for your order.')
ON CONFLICT (dedupe_key) DO NOTHING;
COMMIT;

-- The daemon sends it: pending -> sending -> sent.
\ir status.sql
