-- outbox-mailer schema, version 26: the daemon's claim and outcome write check nothing per statement.
--
-- PostgreSQL evaluates every CHECK constraint of a table on every UPDATE of a row, whichever columns
-- the UPDATE sets, and prepares each constraint's expression again in every statement that updates
-- the table. The seven CHECKs of email_deliveries cost the claim and the outcome write about 30 us
-- each per statement (bench/statement_parts.py; docs/hot-path.md), more than the rest of a one-row
-- update. They guard the columns the daemon writes, and the daemon's own claim session
-- (outbox_mailer.keeps_queue = 'on') writes them only through the fenced claim_due and
-- record_outcomes statements, whose transitions the tests cover; every other writer is still held:
--
-- * INSERT: the content trigger (email_deliveries_check_content, BEFORE INSERT) checks the same rules,
--   under the same constraint names, SQLSTATE 23514, in the application's transaction as before.
-- * UPDATE by any other session (retry, cancel, resolve, the receiver, the console, an application's
--   own UPDATE): the row trigger email_deliveries_sync_queue, now AFTER UPDATE OF the checked and
--   mirrored columns, checks the new row the same way, then keeps email_queue as it did, and sends
--   the wake-up that email_deliveries_notify_requeue sent for a row made due now. It no longer fires
--   in the claim session at all: that session keeps email_queue itself, its statements never move a
--   row between two states other than 'sending', and it wakes the claimers itself when an outcome
--   write makes a row due now (a claim given back untried). One row trigger with a one-term WHEN
--   clause instead of two with long ones: each is prepared again in every UPDATE statement.
--
-- No index changes: the hot-path rule holds.

CREATE FUNCTION email_deliveries_check_states(d email_deliveries) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    -- the former CHECK constraints, by name (the order PostgreSQL evaluated them in); a null result
    -- passes, as it passed a CHECK
    IF (d.attempts >= 0 AND (d.max_attempts IS NULL OR d.max_attempts >= 1)) IS FALSE THEN
        PERFORM email_deliveries_refuse('email_deliveries_attempts_valid');
    END IF;
    IF ((d.status = 'sending') = (d.claim_token IS NOT NULL AND d.claimed_at IS NOT NULL)) IS FALSE THEN
        PERFORM email_deliveries_refuse('email_deliveries_claimed_iff_sending');
    END IF;
    IF (d.delivery_event IN ('delivered', 'delayed', 'bounced', 'complained')) IS FALSE THEN
        PERFORM email_deliveries_refuse('email_deliveries_delivery_event_valid');
    END IF;
    IF (d.scheduled_at >= '1900-01-01 00:00+00' AND d.scheduled_at < '9999-01-01 00:00+00') IS FALSE THEN
        PERFORM email_deliveries_refuse('email_deliveries_scheduled_at_range');
    END IF;
    IF ((d.status = 'sent') = (d.sent_at IS NOT NULL)) IS FALSE THEN
        PERFORM email_deliveries_refuse('email_deliveries_sent_iff_sent_at');
    END IF;
    IF (d.status IN ('pending', 'sending', 'sent', 'failed', 'cancelled', 'in_doubt')) IS FALSE THEN
        PERFORM email_deliveries_refuse('email_deliveries_status_valid');
    END IF;
    IF (d.updated_at >= '1900-01-01 00:00+00' AND d.updated_at < '9999-01-01 00:00+00') IS FALSE THEN
        PERFORM email_deliveries_refuse('email_deliveries_updated_at_range');
    END IF;
END;
$$;
COMMENT ON FUNCTION email_deliveries_check_states(email_deliveries) IS
    'outbox-mailer: the rules of the columns the daemon writes, checked at INSERT and at other sessions'' UPDATEs (schema 26)';

-- the content trigger's function as schema 23 left it, plus the rules above
CREATE OR REPLACE FUNCTION email_deliveries_check_content() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    NEW.content_bytes := email_deliveries_checked_size(NEW);
    IF email_deliveries_control_character(concat_ws(' ', NEW.subject, NEW.from_address, NEW.reply_to,
              array_to_string(NEW.to_addresses, ' '), array_to_string(NEW.cc_addresses, ' '),
              array_to_string(NEW.bcc_addresses, ' '))) IS NOT NULL
       OR (NEW.headers <> '{}'::jsonb AND jsonb_path_exists(NEW.headers,
              'strict $.keyvalue() ? (!(@.key like_regex "^[!-9;-~]{1,76}$") || @.value.type() != "string"
                                      || @.value like_regex "[\x01-\x1f\x7f-\x9f\u2028\u2029]")'))
       OR (NEW.attachments <> '[]'::jsonb AND (
              jsonb_path_exists(NEW.attachments,
                  'strict $[*] ? (@.type() != "object" || @.filename.type() != "string"
                                  || @.content_type.type() != "string" || @.content_base64.type() != "string"
                                  || @.filename like_regex "[\x01-\x1f\x7f-\x9f\u2028\u2029]"
                                  || exists(@.keyvalue() ? (@.key != "filename" && @.key != "content_type"
                                                           && @.key != "content_base64"
                                                           && @.key != "content_id")))')
              -- an inline part: its content_id is judged by the function, which walks the entries
              OR jsonb_path_exists(NEW.attachments, 'lax $[*].content_id ? (@ != null)')
              -- a missing key, which strict mode cannot test for
              OR jsonb_path_exists(NEW.attachments,
                  'lax $[*] ? (!exists(@.filename) || !exists(@.content_type) || !exists(@.content_base64))')))
    THEN
        PERFORM email_deliveries_refuse_hostile(NEW.subject, NEW.from_address, NEW.reply_to, NEW.to_addresses,
            NEW.cc_addresses, NEW.bcc_addresses, NEW.headers, NEW.attachments);
    END IF;
    IF NEW.traceparent IS NOT NULL THEN  -- as schema 25 checks it
        PERFORM email_deliveries_check_traceparent(NEW.traceparent);
    END IF;
    PERFORM email_deliveries_check_states(NEW);
    RETURN NEW;
END;
$fn$;

CREATE OR REPLACE FUNCTION email_deliveries_sync_queue() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = "$user", public AS $$
BEGIN
    PERFORM email_deliveries_check_states(NEW);
    IF OLD.status IS DISTINCT FROM NEW.status OR OLD.scheduled_at IS DISTINCT FROM NEW.scheduled_at
       OR OLD.priority IS DISTINCT FROM NEW.priority OR OLD.transport IS DISTINCT FROM NEW.transport
       OR OLD.dedupe_key IS DISTINCT FROM NEW.dedupe_key THEN
        IF NEW.status IN ('pending', 'sending') THEN
            INSERT INTO email_queue (delivery_id, priority, scheduled_at, transport, claimed_at)
            VALUES (NEW.id, NEW.priority, NEW.scheduled_at, NEW.transport,
                    CASE WHEN NEW.status = 'sending' THEN NEW.claimed_at END)
            ON CONFLICT (delivery_id) DO UPDATE
                SET priority = EXCLUDED.priority, scheduled_at = EXCLUDED.scheduled_at,
                    transport = EXCLUDED.transport, claimed_at = EXCLUDED.claimed_at, batch_id = NULL;
        ELSE
            DELETE FROM email_queue WHERE delivery_id = NEW.id;
        END IF;
    END IF;
    IF NEW.status = 'pending' AND NEW.scheduled_at <= now() THEN
        PERFORM pg_notify('outbox_mailer', '');  -- a row made due now: wake the claimers
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER email_deliveries_notify_requeue ON email_deliveries;
DROP FUNCTION email_deliveries_notify_requeued();
DROP TRIGGER email_deliveries_sync_queue ON email_deliveries;
-- a WHEN clause as short as it can be: PostgreSQL prepares it again in each statement that updates the
-- table, the claim session's included (where it is false)
CREATE TRIGGER email_deliveries_sync_queue
    AFTER UPDATE OF status, scheduled_at, priority, transport, dedupe_key, sent_at, claim_token, claimed_at,
                    attempts, max_attempts, delivery_event, updated_at
    ON email_deliveries FOR EACH ROW
    WHEN (current_setting('outbox_mailer.keeps_queue', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION email_deliveries_sync_queue();

ALTER TABLE email_deliveries
    DROP CONSTRAINT email_deliveries_attempts_valid,
    DROP CONSTRAINT email_deliveries_claimed_iff_sending,
    DROP CONSTRAINT email_deliveries_delivery_event_valid,
    DROP CONSTRAINT email_deliveries_scheduled_at_range,
    DROP CONSTRAINT email_deliveries_sent_iff_sent_at,
    DROP CONSTRAINT email_deliveries_status_valid,
    DROP CONSTRAINT email_deliveries_updated_at_range;
