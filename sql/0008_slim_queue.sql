-- outbox-mailer schema, version 8: the hot path stops copying the fat row.
--
-- Before: status was in the predicates of four partial indexes of
-- email_deliveries, so neither the claim (pending -> sending) nor the outcome
-- write (sending -> sent) could be a HOT update: each wrote a new copy of the
-- whole row, bodies included, to another page, plus entries in every index
-- (3.3 KB of WAL per email).
--
-- After:
-- 1. email_queue, a slim table of the rows the daemons still have to settle
--    (pending and sending), holds what the claim and the rescuer search on:
--    priority, scheduled_at, transport and claimed_at. Its
--    indexes are small and cheap to change. An application's INSERT fills it
--    (the insert trigger, same transaction); the daemon's own statements keep
--    it (queries.sql: claim_due, record_outcomes); any other change of status
--    or schedule (an operator's retry or cancel, an application's UPDATE, an
--    older daemon) is mirrored by a trigger that the daemon's own transitions
--    never fire.
-- 2. email_deliveries keeps only indexes on columns the hot path never changes
--    (id, dedupe_key, created_at, scrubbed_at), so both of its updates per
--    email are HOT; fillfactor 50 keeps room on each page for a new version of
--    every row on it (a claim of consecutive rows updates a whole page at once).
-- 3. status moves to the end of the row: an update's WAL record holds the new
--    row minus the prefix and suffix it shares with the old one, and status was
--    the third column, before the bodies. Now a claim logs the bytes from
--    attempts on (about 150), not the whole email. The move is a new column
--    whose stored default is 'sent' (no rewrite of sent rows, which are most of
--    the history); only rows in another status are written once.
-- 4. Prune and the operator commands are served by indexes on created_at, which
--    the hot path never changes (a row's updated_at >= its created_at).
-- 5. The checks of the application's own columns run when those columns are
--    written (INSERT, or an UPDATE of them), not on every claim and outcome
--    write: same SQLSTATE, same constraint names (see below).
--
-- Every status stays visible to a plain SELECT on email_deliveries. Rows that
-- are pending or sending now are carried into the queue (a sending row keeps
-- its claim, so a rescuer settles it if its daemon is gone); in_doubt rows wait
-- for an operator, as before, and re-enter the queue when retried.

-- ---------------------------------------------------------------- the queue

CREATE TABLE email_queue (
    delivery_id  bigint      PRIMARY KEY REFERENCES email_deliveries (id) ON DELETE CASCADE,
    priority     smallint    NOT NULL,
    scheduled_at timestamptz NOT NULL,
    transport    text,
    claimed_at   timestamptz            -- null: waiting; set: a daemon holds the claim (see email_deliveries)
);

COMMENT ON TABLE email_queue IS
    'outbox-mailer (daemon-owned): the pending and sending rows of email_deliveries, slim, for claiming and rescue. Not an API: read email_deliveries.';

-- The claim: due waiting rows, highest priority first, then oldest.
CREATE INDEX email_queue_due_idx ON email_queue (priority DESC, scheduled_at, delivery_id)
    WHERE claimed_at IS NULL;
-- The rescuer: claims older than the rescue delay.
CREATE INDEX email_queue_claimed_idx ON email_queue (claimed_at) WHERE claimed_at IS NOT NULL;

-- Batch sends (a provider's batch endpoint, one request for many rows): a batch's
-- members, in request order, and its idempotency key are written here before
-- the request is made, and each member's queue row points at it until the row
-- is settled or retried, so that an ambiguous answer, or a daemon killed during
-- the request, is resent by a rescuer as the identical batch under the same key.
CREATE TABLE email_batches (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    transport       text        NOT NULL,
    idempotency_key text        NOT NULL,
    member_ids      bigint[]    NOT NULL,  -- email_deliveries ids, in request order
    sends           integer     NOT NULL DEFAULT 1,  -- requests made with this key
    created_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT email_batches_members CHECK (cardinality(member_ids) >= 1)
);

COMMENT ON TABLE email_batches IS
    'outbox-mailer (daemon-owned): provider batch requests, recorded before they are made; not an API.';

ALTER TABLE email_queue ADD COLUMN batch_id bigint;  -- the batch this row was last sent in, until settled

CREATE INDEX email_queue_batch_idx ON email_queue (batch_id) WHERE batch_id IS NOT NULL;

-- Every row is inserted, updated and deleted within seconds: vacuum early.
ALTER TABLE email_queue SET (
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 1
);

-- ---------------------------------------------------------------- status at the end

-- The triggers whose WHEN names status, and the indexes with status in their
-- predicate, go first (the indexes would go with the column anyway).
DROP TRIGGER email_deliveries_notify_requeue ON email_deliveries;
DROP INDEX email_deliveries_claim_idx, email_deliveries_sending_idx, email_deliveries_unscrubbed_idx,
    email_deliveries_final_idx;

ALTER TABLE email_deliveries ADD COLUMN status_v8 text NOT NULL DEFAULT 'sent';
UPDATE email_deliveries SET status_v8 = status WHERE status <> 'sent';
ALTER TABLE email_deliveries DROP COLUMN status;
ALTER TABLE email_deliveries RENAME COLUMN status_v8 TO status;
ALTER TABLE email_deliveries ALTER COLUMN status SET DEFAULT 'pending';

ALTER TABLE email_deliveries
    ADD CONSTRAINT email_deliveries_status_valid
        CHECK (status IN ('pending', 'sending', 'sent', 'failed', 'cancelled', 'in_doubt')),
    ADD CONSTRAINT email_deliveries_sent_iff_sent_at
        CHECK ((status = 'sent') = (sent_at IS NOT NULL)),
    ADD CONSTRAINT email_deliveries_claimed_iff_sending
        CHECK ((status = 'sending') = (claim_token IS NOT NULL AND claimed_at IS NOT NULL));

-- Rows from before schema 6 have no content_bytes: the claim reads it as is now.
UPDATE email_deliveries d SET content_bytes = email_deliveries_checked_size(d) WHERE content_bytes IS NULL;

ALTER TABLE email_deliveries SET (fillfactor = 50);

-- ---------------------------------------------------------------- content checks on write, not on every update

-- PostgreSQL evaluates every CHECK constraint on every UPDATE, whichever columns
-- change: the checks of the application's own columns (a regular expression on
-- the dedupe key, jsonb_typeof of three documents, array scans) cost each claim
-- and each outcome write about 14 us of PostgreSQL CPU (measured: 21.5 -> 7.7 us
-- per claimed row), for columns the daemon never writes. They move into the
-- content trigger, which runs on INSERT and after an UPDATE of those columns,
-- and refuse the same rows with the same SQLSTATE (23514, check_violation) and
-- the same constraint names as before. The CHECKs on columns the daemon writes
-- (status and its companions, attempts, scheduled_at, updated_at) stay.
ALTER TABLE email_deliveries
    DROP CONSTRAINT email_deliveries_dedupe_key_valid,
    DROP CONSTRAINT email_deliveries_has_recipient,
    DROP CONSTRAINT email_deliveries_cc_bcc_no_nulls,
    DROP CONSTRAINT email_deliveries_addresses_flat,
    DROP CONSTRAINT email_deliveries_has_body,
    DROP CONSTRAINT email_deliveries_headers_object,
    DROP CONSTRAINT email_deliveries_attachments_array,
    DROP CONSTRAINT email_deliveries_metadata_object,
    DROP CONSTRAINT email_deliveries_transport_valid,
    DROP CONSTRAINT email_deliveries_expires_at_range,
    DROP CONSTRAINT email_deliveries_created_at_range;

CREATE FUNCTION email_deliveries_refuse(constraint_name text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'new row for relation "email_deliveries" violates check constraint "%"', constraint_name
        USING ERRCODE = 'check_violation', CONSTRAINT = constraint_name, TABLE = 'email_deliveries';
END;
$$;

CREATE OR REPLACE FUNCTION email_deliveries_checked_size(d email_deliveries) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    field text;
    doc jsonb;
BEGIN
    -- in the order PostgreSQL evaluated these CHECK constraints (by name)
    IF NOT (array_ndims(d.to_addresses) = 1 AND coalesce(array_ndims(d.cc_addresses), 1) = 1
            AND coalesce(array_ndims(d.bcc_addresses), 1) = 1) THEN
        PERFORM email_deliveries_refuse('email_deliveries_addresses_flat');
    END IF;
    IF jsonb_typeof(d.attachments) <> 'array' THEN
        PERFORM email_deliveries_refuse('email_deliveries_attachments_array');
    END IF;
    IF array_position(d.cc_addresses, NULL) IS NOT NULL OR array_position(d.bcc_addresses, NULL) IS NOT NULL THEN
        PERFORM email_deliveries_refuse('email_deliveries_cc_bcc_no_nulls');
    END IF;
    IF NOT (d.created_at >= '1900-01-01 00:00+00' AND d.created_at < '9999-01-01 00:00+00') THEN
        PERFORM email_deliveries_refuse('email_deliveries_created_at_range');
    END IF;
    IF NOT (char_length(d.dedupe_key) BETWEEN 1 AND 255 AND d.dedupe_key !~ '[[:cntrl:]]') THEN
        PERFORM email_deliveries_refuse('email_deliveries_dedupe_key_valid');
    END IF;
    IF NOT (d.expires_at IS NULL OR d.expires_at = 'infinity'
            OR (d.expires_at >= '1900-01-01 00:00+00' AND d.expires_at < '9999-01-01 00:00+00')) THEN
        PERFORM email_deliveries_refuse('email_deliveries_expires_at_range');
    END IF;
    IF d.text_body IS NULL AND d.html_body IS NULL THEN
        PERFORM email_deliveries_refuse('email_deliveries_has_body');
    END IF;
    IF NOT (cardinality(d.to_addresses) >= 1 AND array_position(d.to_addresses, NULL) IS NULL) THEN
        PERFORM email_deliveries_refuse('email_deliveries_has_recipient');
    END IF;
    IF jsonb_typeof(d.headers) <> 'object' THEN
        PERFORM email_deliveries_refuse('email_deliveries_headers_object');
    END IF;
    IF jsonb_typeof(d.metadata) <> 'object' THEN
        PERFORM email_deliveries_refuse('email_deliveries_metadata_object');
    END IF;
    IF NOT (d.transport IS NULL OR (char_length(d.transport) BETWEEN 1 AND 64 AND d.transport !~ '[[:cntrl:]]')) THEN
        PERFORM email_deliveries_refuse('email_deliveries_transport_valid');
    END IF;
    FOREACH field IN ARRAY ARRAY['headers', 'attachments', 'metadata'] LOOP
        doc := CASE field WHEN 'headers' THEN d.headers WHEN 'attachments' THEN d.attachments
                          ELSE d.metadata END;
        IF jsonb_path_exists(doc, 'strict $.**{33 to last}') THEN
            RAISE EXCEPTION 'email_deliveries.%: JSON nested more than 32 levels deep', field
                USING ERRCODE = 'check_violation', CONSTRAINT = 'email_deliveries_json_depth',
                      TABLE = 'email_deliveries', COLUMN = field;
        END IF;
        IF jsonb_path_exists(doc, 'strict $.** ? (@.type() == "number" && (@ > 1e300 || @ < -1e300))') THEN
            RAISE EXCEPTION 'email_deliveries.%: a JSON number beyond +/-1e300 (no double holds it)', field
                USING ERRCODE = 'check_violation', CONSTRAINT = 'email_deliveries_json_numbers',
                      TABLE = 'email_deliveries', COLUMN = field;
        END IF;
    END LOOP;
    RETURN octet_length(d.subject)
        + coalesce(octet_length(d.text_body), 0) + coalesce(octet_length(d.html_body), 0)
        + coalesce(octet_length(array_to_string(d.to_addresses, ' ')), 0)
        + coalesce(octet_length(array_to_string(d.cc_addresses, ' ')), 0)
        + coalesce(octet_length(array_to_string(d.bcc_addresses, ' ')), 0)
        + coalesce(octet_length(d.headers::text), 0)
        + coalesce(octet_length(d.attachments::text), 0)
        + coalesce(octet_length(d.metadata::text), 0);
END;
$$;

-- The recheck after an UPDATE now covers every column those checks read.
DROP TRIGGER email_deliveries_recheck_content ON email_deliveries;
CREATE TRIGGER email_deliveries_recheck_content
    AFTER UPDATE OF dedupe_key, subject, text_body, html_body, to_addresses, cc_addresses, bcc_addresses,
                    headers, attachments, metadata, transport, expires_at, created_at
    ON email_deliveries
    FOR EACH ROW EXECUTE FUNCTION email_deliveries_recheck_content();

-- ---------------------------------------------------------------- indexes the hot path never touches

CREATE INDEX email_deliveries_created_idx ON email_deliveries (created_at);
CREATE INDEX email_deliveries_unscrubbed_idx ON email_deliveries (created_at) WHERE scrubbed_at IS NULL;

-- ---------------------------------------------------------------- keeping the queue

-- On INSERT (statement level: one call for a bulk insert): queue the pending
-- rows and wake the daemons when one is due now. SECURITY DEFINER, so an
-- application role that may only INSERT into email_deliveries needs no grant
-- on email_queue; search_path pinned to the one the migration ran with.
CREATE OR REPLACE FUNCTION email_deliveries_notify() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO email_queue (delivery_id, priority, scheduled_at, transport)
    SELECT id, priority, scheduled_at, transport
    FROM new_rows WHERE status = 'pending';
    IF EXISTS (SELECT 1 FROM new_rows WHERE status = 'pending' AND scheduled_at <= now()) THEN
        PERFORM pg_notify('outbox_mailer', '');
    END IF;
    RETURN NULL;
END;
$$;

-- Any change of status or schedule made by a session that does not keep the
-- queue itself: an operator's retry, cancel or resolve, an application's own
-- UPDATE, a daemon of an older version still running between `migrate` and
-- its restart. The daemon's claim session says it keeps the queue
-- (SET outbox_mailer.keeps_queue = 'on'), so its transitions, which all start
-- or end in 'sending', never call this. A pending row is (re)queued with its
-- schedule, a sending row keeps its claim time (for the rescuer), any other
-- status leaves the queue.
CREATE FUNCTION email_deliveries_sync_queue() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
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
    RETURN NULL;
END;
$$;

CREATE TRIGGER email_deliveries_sync_queue
    AFTER UPDATE ON email_deliveries
    FOR EACH ROW
    WHEN ((OLD.status, OLD.scheduled_at, OLD.priority, OLD.transport, OLD.dedupe_key)
              IS DISTINCT FROM (NEW.status, NEW.scheduled_at, NEW.priority, NEW.transport, NEW.dedupe_key)
          AND ((OLD.status <> 'sending' AND NEW.status <> 'sending')
               OR current_setting('outbox_mailer.keeps_queue', true) IS DISTINCT FROM 'on'))
    EXECUTE FUNCTION email_deliveries_sync_queue();

-- The wake-up for a row put back to pending and due now (version 5), again.
CREATE TRIGGER email_deliveries_notify_requeue
    AFTER UPDATE ON email_deliveries
    FOR EACH ROW
    WHEN (NEW.status = 'pending' AND NEW.scheduled_at <= now())
    EXECUTE FUNCTION email_deliveries_notify_requeued();

-- ---------------------------------------------------------------- rows in flight now

INSERT INTO email_queue (delivery_id, priority, scheduled_at, transport, claimed_at)
SELECT id, priority, scheduled_at, transport,
       CASE WHEN status = 'sending' THEN claimed_at END
FROM email_deliveries
WHERE status IN ('pending', 'sending');
