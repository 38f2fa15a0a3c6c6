-- outbox-mailer schema, version 6: refuse at INSERT what the daemon can never
-- send, know a row's size before loading it, and remember recipients.
--
-- 1. Timestamps the daemon (and most languages' date types) cannot represent
--    are refused by CHECK constraints: years outside 1900-9998, and infinities,
--    except expires_at = 'infinity', which means "never expires" (as NULL does).
--    Plain comparisons: evaluated on every UPDATE too, at no measurable cost.
-- 2. JSON that no parser handles safely (nested more than 32 levels, numbers
--    beyond +/-1e300, which no double holds) is refused by a trigger on INSERT
--    and on UPDATE of the content columns only: a CHECK would re-read every
--    jsonb value (attachments included) on each claim and outcome write, which
--    never change them. Multi-dimensional address arrays by a CHECK.
-- 3. The same trigger writes content_bytes, the size of the row's content
--    (subject, bodies, addresses, headers, attachments, metadata as text), so a
--    claim can leave out the content of a row larger than the daemon's limit
--    and fail it without loading it into memory.
-- 4. Recipients: an attempt that reached some recipients and was refused for
--    others with a temporary reply retries only those (retry_recipients); the
--    ones that never got the message are kept on the row (refused_recipients),
--    and each attempt keeps its complete list of refusals (refused, unclipped).
--
-- Rows that already break the new rules, and are not final, are failed here
-- with the reason and their original values in last_error (final rows keep
-- their status and get the same note), so that the constraints can be validated.
-- None of the new columns is indexed (the hot-path rule).

ALTER TABLE email_deliveries
    ADD COLUMN content_bytes      bigint,
    ADD COLUMN retry_recipients   text[],
    ADD COLUMN refused_recipients text[] NOT NULL DEFAULT '{}';

COMMENT ON COLUMN email_deliveries.content_bytes IS
    'db-owned (trigger): octets of the row''s content; rows over the daemon''s max_message_bytes fail unread';
COMMENT ON COLUMN email_deliveries.retry_recipients IS
    'daemon-owned: envelope recipients the next attempt sends to (null = all); set after a partial refusal';
COMMENT ON COLUMN email_deliveries.refused_recipients IS
    'daemon-owned: envelope recipients that will not get this email; status sent with {} = every recipient got it';

ALTER TABLE email_delivery_attempts
    ADD COLUMN refused jsonb;

COMMENT ON COLUMN email_delivery_attempts.refused IS
    'every recipient this attempt did not reach: [{"address", "reply_code", "message", "unknown"}]';

-- ---------------------------------------------------------------- existing rows

UPDATE email_deliveries
SET status = CASE WHEN status IN ('sent', 'failed', 'cancelled') THEN status ELSE 'failed' END,
    claim_token = NULL,
    last_error = left(coalesce(last_error || '; ', '')
        || 'schema version 6 found a timestamp out of range (scheduled_at ' || scheduled_at::text
        || ', expires_at ' || coalesce(expires_at::text, 'null') || ', created_at ' || created_at::text
        || ', updated_at ' || updated_at::text || ')', 2000),
    scheduled_at = least(greatest(scheduled_at, '1900-01-01 00:00+00'), '9998-12-31 00:00+00'),
    expires_at = CASE WHEN expires_at = 'infinity'
                        OR (expires_at >= '1900-01-01 00:00+00' AND expires_at < '9999-01-01 00:00+00')
                      THEN expires_at END,
    created_at = least(greatest(created_at, '1900-01-01 00:00+00'), '9998-12-31 00:00+00'),
    updated_at = now()
WHERE NOT (scheduled_at >= '1900-01-01 00:00+00' AND scheduled_at < '9999-01-01 00:00+00')
   OR NOT (expires_at IS NULL OR expires_at = 'infinity'
           OR (expires_at >= '1900-01-01 00:00+00' AND expires_at < '9999-01-01 00:00+00'))
   OR NOT (created_at >= '1900-01-01 00:00+00' AND created_at < '9999-01-01 00:00+00')
   OR NOT (updated_at >= '1900-01-01 00:00+00' AND updated_at < '9999-01-01 00:00+00');

-- ---------------------------------------------------------------- timestamps

ALTER TABLE email_deliveries
    ADD CONSTRAINT email_deliveries_scheduled_at_range
        CHECK (scheduled_at >= '1900-01-01 00:00+00' AND scheduled_at < '9999-01-01 00:00+00') NOT VALID,
    ADD CONSTRAINT email_deliveries_expires_at_range
        CHECK (expires_at IS NULL OR expires_at = 'infinity'
               OR (expires_at >= '1900-01-01 00:00+00' AND expires_at < '9999-01-01 00:00+00')) NOT VALID,
    ADD CONSTRAINT email_deliveries_created_at_range
        CHECK (created_at >= '1900-01-01 00:00+00' AND created_at < '9999-01-01 00:00+00') NOT VALID,
    ADD CONSTRAINT email_deliveries_updated_at_range
        CHECK (updated_at >= '1900-01-01 00:00+00' AND updated_at < '9999-01-01 00:00+00') NOT VALID,
    ADD CONSTRAINT email_deliveries_addresses_flat
        CHECK (array_ndims(to_addresses) = 1 AND coalesce(array_ndims(cc_addresses), 1) = 1
               AND coalesce(array_ndims(bcc_addresses), 1) = 1) NOT VALID;

-- VALIDATE scans without blocking writers (SHARE UPDATE EXCLUSIVE).
ALTER TABLE email_deliveries VALIDATE CONSTRAINT email_deliveries_scheduled_at_range;
ALTER TABLE email_deliveries VALIDATE CONSTRAINT email_deliveries_expires_at_range;
ALTER TABLE email_deliveries VALIDATE CONSTRAINT email_deliveries_created_at_range;
ALTER TABLE email_deliveries VALIDATE CONSTRAINT email_deliveries_updated_at_range;

-- Rows with nested address arrays cannot be sent: fail them, then validate.
UPDATE email_deliveries
SET status = CASE WHEN status IN ('sent', 'failed', 'cancelled') THEN status ELSE 'failed' END,
    claim_token = NULL, updated_at = now(),
    last_error = left(coalesce(last_error || '; ', '')
        || 'schema version 6 flattened a multi-dimensional address array', 2000),
    to_addresses = ARRAY(SELECT unnest(to_addresses)),
    cc_addresses = ARRAY(SELECT unnest(cc_addresses)),
    bcc_addresses = ARRAY(SELECT unnest(bcc_addresses))
WHERE NOT (array_ndims(to_addresses) = 1 AND coalesce(array_ndims(cc_addresses), 1) = 1
           AND coalesce(array_ndims(bcc_addresses), 1) = 1);
ALTER TABLE email_deliveries VALIDATE CONSTRAINT email_deliveries_addresses_flat;

-- ---------------------------------------------------------------- content

-- The checks and the size, said once; called on INSERT (BEFORE, so the row
-- carries its size) and after an UPDATE of a content column. Not a BEFORE
-- UPDATE trigger: PostgreSQL fetches and locks the old row for any BEFORE
-- UPDATE row trigger, before looking at its column list, which would cost
-- every claim and outcome write (measured: ~15% more PostgreSQL CPU per email).
CREATE FUNCTION email_deliveries_checked_size(d email_deliveries) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    field text;
    doc jsonb;
BEGIN
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

CREATE FUNCTION email_deliveries_check_content() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.content_bytes := email_deliveries_checked_size(NEW);
    RETURN NEW;
END;
$$;

CREATE TRIGGER email_deliveries_check_content
    BEFORE INSERT ON email_deliveries
    FOR EACH ROW EXECUTE FUNCTION email_deliveries_check_content();

-- After an UPDATE of the content (prune's scrub; an application fixing a row):
-- check it and write its new size. The nested UPDATE sets content_bytes only,
-- which is not in this trigger's column list, so it does not fire it again.
CREATE FUNCTION email_deliveries_recheck_content() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE email_deliveries SET content_bytes = email_deliveries_checked_size(NEW) WHERE id = NEW.id;
    RETURN NULL;
END;
$$;

CREATE TRIGGER email_deliveries_recheck_content
    AFTER UPDATE OF subject, text_body, html_body, to_addresses, cc_addresses, bcc_addresses,
                    headers, attachments, metadata
    ON email_deliveries
    FOR EACH ROW EXECUTE FUNCTION email_deliveries_recheck_content();
