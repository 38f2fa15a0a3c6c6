-- outbox-mailer schema, version 1.
-- Forward-only. Runnable by `outbox-mailer migrate` or by any migration tool
-- (psql -f, Flyway, Alembic, Rails): it does not depend on the tool's own tables.

CREATE TABLE email_deliveries (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    dedupe_key          text        NOT NULL,
    status              text        NOT NULL DEFAULT 'pending',
    from_address        text,
    to_addresses        text[]      NOT NULL,
    cc_addresses        text[]      NOT NULL DEFAULT '{}',
    bcc_addresses       text[]      NOT NULL DEFAULT '{}',
    reply_to            text,
    subject             text        NOT NULL,
    text_body           text,
    html_body           text,
    headers             jsonb       NOT NULL DEFAULT '{}',
    attachments         jsonb       NOT NULL DEFAULT '[]',
    metadata            jsonb       NOT NULL DEFAULT '{}',
    transport           text,
    priority            smallint    NOT NULL DEFAULT 0,
    scheduled_at        timestamptz NOT NULL DEFAULT now(),
    expires_at          timestamptz,
    max_attempts        integer,
    attempts            integer     NOT NULL DEFAULT 0,
    last_error          text,
    provider_message_id text,
    sent_at             timestamptz,
    -- the claim: who holds the row while it is 'sending' (daemon-owned)
    claim_token         uuid,
    claimed_at          timestamptz,
    claimed_by          text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),

    CONSTRAINT email_deliveries_dedupe_key_key UNIQUE (dedupe_key),
    CONSTRAINT email_deliveries_dedupe_key_valid
        CHECK (char_length(dedupe_key) BETWEEN 1 AND 255 AND dedupe_key !~ '[[:cntrl:]]'),
    CONSTRAINT email_deliveries_status_valid
        CHECK (status IN ('pending', 'sending', 'sent', 'failed', 'cancelled', 'in_doubt')),
    CONSTRAINT email_deliveries_has_recipient
        CHECK (cardinality(to_addresses) >= 1 AND array_position(to_addresses, NULL) IS NULL),
    CONSTRAINT email_deliveries_cc_bcc_no_nulls
        CHECK (array_position(cc_addresses, NULL) IS NULL AND array_position(bcc_addresses, NULL) IS NULL),
    CONSTRAINT email_deliveries_has_body
        CHECK (text_body IS NOT NULL OR html_body IS NOT NULL),
    CONSTRAINT email_deliveries_sent_iff_sent_at
        CHECK ((status = 'sent') = (sent_at IS NOT NULL)),
    CONSTRAINT email_deliveries_claimed_iff_sending
        CHECK ((status = 'sending') = (claim_token IS NOT NULL AND claimed_at IS NOT NULL)),
    CONSTRAINT email_deliveries_headers_object
        CHECK (jsonb_typeof(headers) = 'object'),
    CONSTRAINT email_deliveries_attachments_array
        CHECK (jsonb_typeof(attachments) = 'array'),
    CONSTRAINT email_deliveries_metadata_object
        CHECK (jsonb_typeof(metadata) = 'object'),
    CONSTRAINT email_deliveries_attempts_valid
        CHECK (attempts >= 0 AND (max_attempts IS NULL OR max_attempts >= 1)),
    CONSTRAINT email_deliveries_transport_valid
        CHECK (transport IS NULL OR (char_length(transport) BETWEEN 1 AND 64 AND transport !~ '[[:cntrl:]]'))
);

COMMENT ON TABLE email_deliveries IS
    'outbox-mailer: one row per email. Applications INSERT (ON CONFLICT (dedupe_key) DO NOTHING) and SELECT; the daemon owns status.';

-- Serves the claim: due pending rows, highest priority first, then oldest.
-- Partial, so sent/failed history does not grow it.
CREATE INDEX email_deliveries_claim_idx
    ON email_deliveries (priority DESC, scheduled_at, id)
    WHERE status = 'pending';

-- Serves the rescuer: rows left in 'sending'.
CREATE INDEX email_deliveries_sending_idx
    ON email_deliveries (claimed_at)
    WHERE status = 'sending';

-- A hot queue table: every row is updated two or three times within seconds.
-- Vacuum early so dead index entries at the head of the claim index do not
-- pile up, and leave room on each page for HOT updates.
ALTER TABLE email_deliveries SET (
    fillfactor = 80,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 1
);

CREATE TABLE email_delivery_attempts (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id   bigint      NOT NULL REFERENCES email_deliveries (id) ON DELETE CASCADE,
    attempt       integer     NOT NULL,
    started_at    timestamptz NOT NULL,
    finished_at   timestamptz NOT NULL,
    outcome       text        NOT NULL,
    reply_code    smallint,
    enhanced_code text,
    error         text,
    transport     text        NOT NULL,
    worker        text        NOT NULL,
    CONSTRAINT email_delivery_attempts_outcome_valid
        CHECK (outcome IN ('sent', 'transient', 'permanent', 'ambiguous')),
    CONSTRAINT email_delivery_attempts_time_order CHECK (finished_at >= started_at)
);

CREATE INDEX email_delivery_attempts_delivery_idx ON email_delivery_attempts (delivery_id, attempt);

-- Wake the daemons when work becomes due now: on INSERT, and on UPDATE that
-- puts a row back to pending (retry, requeue). Statement level, so a bulk
-- insert of 10,000 rows sends one notification, and only after COMMIT.
CREATE FUNCTION email_deliveries_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM new_rows WHERE status = 'pending' AND scheduled_at <= now()) THEN
        PERFORM pg_notify('outbox_mailer', '');
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER email_deliveries_notify_insert
    AFTER INSERT ON email_deliveries
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION email_deliveries_notify();

CREATE TRIGGER email_deliveries_notify_update
    AFTER UPDATE ON email_deliveries
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION email_deliveries_notify();
