-- outbox-mailer schema, version 5: less work per email for PostgreSQL.
--
-- 1. The wake-up on UPDATE was a statement-level trigger with a transition
--    table, so PostgreSQL copied every row of every claim and every outcome
--    write (bodies included) into a tuplestore, only to find no row put back to
--    pending. A row-level trigger with a WHEN condition is not even called for
--    those; it notifies for a row requeued and due now (a retry for later does
--    not notify: the daemon's timer covers it). PostgreSQL folds the identical
--    notifications of one transaction into one, and sends it after COMMIT.
-- 2. email_delivery_attempts_delivery_idx (delivery_id, attempt) is the leading
--    part of the unique email_delivery_attempts_once_idx (version 3), which
--    serves the same lookups: one index fewer to update per attempt.

DROP TRIGGER email_deliveries_notify_update ON email_deliveries;

CREATE FUNCTION email_deliveries_notify_requeued() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outbox_mailer', '');
    RETURN NULL;
END;
$$;

CREATE TRIGGER email_deliveries_notify_requeue
    AFTER UPDATE ON email_deliveries
    FOR EACH ROW
    WHEN (NEW.status = 'pending' AND NEW.scheduled_at <= now())
    EXECUTE FUNCTION email_deliveries_notify_requeued();

DROP INDEX email_delivery_attempts_delivery_idx;
