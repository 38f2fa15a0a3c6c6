-- Enqueue one email that names a stored template, with its data, then read its status.
--
--   psql "$DATABASE_URL" -X -q -v key=order-44 -v to=carol@example.com -v template=order-confirmation \
--        -f examples/sql/enqueue_template.sql
--
-- The row gives no subject nor body: the daemon renders the template's latest version with template_data.
-- A template that does not exist is refused at the INSERT: psql prints the error and exits 3.
\set ON_ERROR_STOP on

BEGIN;
-- ... your own writes go here, in the same transaction ...
INSERT INTO email_deliveries (dedupe_key, to_addresses, template, template_data)
VALUES (:'key', ARRAY[:'to'], :'template', jsonb_build_object('order', :'key'))
ON CONFLICT (dedupe_key) DO NOTHING;
COMMIT;

\ir status.sql
