-- Least privilege for the operator console (`outbox-mailer console`), for people who manage roles
-- themselves. `outbox-mailer grant ... --console-role CONSOLE` runs the same statements, and
-- creates the role (LOGIN, no password: set one, or use peer or certificate authentication)
-- when it does not exist. With psql, the role must exist:
--   psql -v console_role=mailer_console -f sql/grants/console_role.sql
-- Not a migration: it is not applied by `migrate`.

-- Read every email, attempt, event, suppression, the queue and the transports' limits, what
-- operators did, and the stored templates (schema 27; their versions are immutable).
-- (What an earlier version of this script granted is taken back first.)
REVOKE ALL ON email_deliveries, email_suppressions, email_operator_actions, email_console_users
    FROM :"console_role";
GRANT USAGE ON SCHEMA public TO :"console_role";
GRANT SELECT ON email_deliveries, email_delivery_attempts, email_delivery_events, email_suppressions, email_queue,
    email_transport_limits, email_operator_actions, email_templates, outbox_mailer_migrations TO :"console_role";
-- The users' names and roles, not their password hashes: sign-in asks for one user's hash at a time.
GRANT SELECT (name, role, created_at) ON email_console_users TO :"console_role";
GRANT EXECUTE ON FUNCTION email_console_password_hash(text) TO :"console_role";
-- Sessions (schema 22): started at sign-in, seen, ended.
GRANT SELECT, INSERT, DELETE ON email_console_sessions TO :"console_role";
GRANT UPDATE (seen_at) ON email_console_sessions TO :"console_role";
-- Nothing is changed directly: retry, cancel, resolve (one row or a bulk selection), suppress and
-- unsuppress are functions (SECURITY DEFINER, fixed search_path) that follow the CLI's rules (no
-- sent row back to pending), take the actor from an operator's session row and record the action.
GRANT EXECUTE ON FUNCTION email_console_act(bytea, text, text[], text, integer, jsonb),
    email_console_suppress(bytea, text, text, timestamptz), email_console_unsuppress(bytea, text)
    TO :"console_role";
-- Transport pauses (schema 24): read on the overview; pause and resume through functions like the others.
GRANT SELECT ON email_transport_pauses TO :"console_role";
GRANT EXECUTE ON FUNCTION email_console_pause(bytea, text, text, timestamptz), email_console_resume(bytea, text)
    TO :"console_role";
