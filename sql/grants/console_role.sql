-- Least privilege for the operator console (`outbox-mailer console`), for people who manage roles
-- themselves. `outbox-mailer grant ... --console-role CONSOLE` runs the same statements, and
-- creates the role (LOGIN, no password: set one, or use peer or certificate authentication)
-- when it does not exist. With psql, the role must exist:
--   psql -v console_role=mailer_console -f sql/grants/console_role.sql
-- Not a migration: it is not applied by `migrate`.

-- Read every email, attempt, event, suppression, the queue and the transports' limits.
GRANT USAGE ON SCHEMA public TO :"console_role";
GRANT SELECT ON email_deliveries, email_delivery_attempts, email_delivery_events, email_suppressions, email_queue,
    email_transport_limits, outbox_mailer_migrations TO :"console_role";
-- The operator actions, as the CLI does them: retry, cancel, resolve change these columns only (the
-- status trigger, SECURITY DEFINER, queues a retried row); no INSERT, no DELETE, no content.
GRANT UPDATE (status, scheduled_at, max_attempts, last_error, updated_at, sent_at) ON email_deliveries
    TO :"console_role";
-- Suppressions: add (an existing one is replaced) and remove.
GRANT INSERT, DELETE ON email_suppressions TO :"console_role";
GRANT UPDATE (reason, source, expires_at, created_at, delivery_id) ON email_suppressions TO :"console_role";
-- Sign-in reads the users (managed with `outbox-mailer console-user`, as the daemon's role);
-- every action is recorded.
GRANT SELECT ON email_console_users TO :"console_role";
-- Sessions (schema 22): started at sign-in, seen, ended.
GRANT SELECT, INSERT, DELETE ON email_console_sessions TO :"console_role";
GRANT UPDATE (seen_at) ON email_console_sessions TO :"console_role";
GRANT SELECT, INSERT ON email_operator_actions TO :"console_role";
