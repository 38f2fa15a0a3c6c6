-- Least privilege for outbox-mailer, for people who manage roles themselves.
-- `outbox-mailer grant --app-role APP --daemon-role DAEMON` runs the same
-- statements. With psql:
--   psql -v app_role=myapp -v daemon_role=mailer -f sql/grants/roles.sql
-- The roles must exist. Not a migration: it is not applied by `migrate`.

-- The application: enqueue (INSERT of the columns it owns) and read status.
-- No UPDATE, no DELETE: only the daemon changes a row once it is written. Nothing on
-- email_queue: the insert trigger (SECURITY DEFINER) queues the row.
GRANT USAGE ON SCHEMA public TO :"app_role";
GRANT SELECT ON email_deliveries, email_delivery_attempts, email_delivery_events TO :"app_role";
GRANT INSERT (dedupe_key, from_address, to_addresses, cc_addresses, bcc_addresses, reply_to, subject,
              text_body, html_body, headers, attachments, metadata, transport, priority, scheduled_at,
              expires_at, max_attempts, ignore_suppressions, traceparent, template, template_data, locale,
              template_version, unsubscribe_category,
              provider_template)
    ON email_deliveries TO :"app_role";
-- A row naming a template: the INSERT resolves its version through a SECURITY DEFINER function (schema 27),
-- so the application needs no grant on email_templates.

-- The daemon (and the operator CLI): claim, record, retry, cancel, prune.
GRANT USAGE ON SCHEMA public TO :"daemon_role";
GRANT SELECT, INSERT, UPDATE, DELETE ON email_deliveries TO :"daemon_role";
GRANT SELECT, INSERT, DELETE ON email_delivery_attempts TO :"daemon_role";
GRANT SELECT, INSERT, UPDATE, DELETE ON email_queue TO :"daemon_role";
GRANT SELECT ON outbox_mailer_migrations TO :"daemon_role";
-- Templates (schema 27): read to render, added by `outbox-mailer template add` (versions are immutable).
GRANT SELECT, INSERT ON email_templates TO :"daemon_role";
-- Delivery events, suppressions and single-use webhook tokens (the receiver, ingest-dsn, the CLI).
GRANT SELECT, INSERT, UPDATE, DELETE ON email_delivery_events, email_suppressions, email_webhook_tokens
    TO :"daemon_role";
-- Provider batch requests as recorded before they are made (schema 8).
GRANT SELECT, INSERT, UPDATE, DELETE ON email_batches TO :"daemon_role";
-- Transport limits shared by every daemon (schema 11): grants of rate and daily capacity.
GRANT SELECT, INSERT, UPDATE, DELETE ON email_transport_limits, email_transport_usage TO :"daemon_role";
-- Daemon processes, for instant recovery on the same host (schema 13).
GRANT SELECT, INSERT, UPDATE, DELETE ON email_daemon_processes TO :"daemon_role";
-- The operator console's users (`outbox-mailer console-user`) and what operators did (schema 17).
GRANT SELECT, INSERT, DELETE ON email_console_users TO :"daemon_role";
-- Removing a console user ends its sessions; retry, cancel, resolve and suppress follow the rules of
-- their functions (schema 22).
GRANT SELECT, DELETE ON email_console_sessions TO :"daemon_role";
GRANT EXECUTE ON FUNCTION email_delivery_retry(text[], integer, integer), email_delivery_cancel(text[]),
    email_delivery_resolve(text, text), email_suppress(text, text, text, timestamptz),
    email_suppress(text, text, text, timestamptz, text) TO :"daemon_role";
GRANT SELECT, INSERT ON email_operator_actions TO :"daemon_role";
-- Transport pauses (schema 24): every daemon reads them and publishes its circuit breaker's; `pause`
-- and `resume` follow the rules of their functions and record the action.
GRANT SELECT, INSERT, UPDATE, DELETE ON email_transport_pauses TO :"daemon_role";
GRANT EXECUTE ON FUNCTION email_transport_pause(text, text, text, timestamptz), email_transport_resume(text, text)
    TO :"daemon_role";
