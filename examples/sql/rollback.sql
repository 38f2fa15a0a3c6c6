-- The same insert in a transaction that rolls back: the row never existed, nothing is sent.
--
--   psql "$DATABASE_URL" -X -q -v key=order-43 -v to=bob@example.com -f examples/sql/rollback.sql
\set ON_ERROR_STOP on

BEGIN;
INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body)
VALUES (:'key', ARRAY[:'to'], 'Your order', 'Thank you for your order.')
ON CONFLICT (dedupe_key) DO NOTHING;
ROLLBACK;  -- e.g. a later step of your business transaction failed

-- status is null: there is no such email.
\pset tuples_only on
\pset format unaligned
SELECT json_build_object('dedupe_key', :'key',
                         'status', (SELECT status FROM email_deliveries WHERE dedupe_key = :'key'));
