-- outbox-mailer schema, version 30: a cheaper INSERT (docs/hot-path.md, "The application's INSERT").
--
-- The application's INSERT is the user's database paying for every email, so its two triggers are made lighter;
-- what they check and do is unchanged.
--
-- * The queue row is written by a row trigger (AFTER INSERT ... FOR EACH ROW) instead of a statement trigger
--   with a transition table. The transition table copied every inserted row, bodies included, into a
--   tuplestore, then read it twice (the queue INSERT, the test for a row due now): for the one-row INSERT of a
--   web request that cost more than the row trigger's one queue INSERT. A bulk INSERT still sends one
--   notification (PostgreSQL folds the same channel and payload in one transaction into one) and still only
--   at COMMIT; a row skipped by ON CONFLICT DO NOTHING fires no AFTER INSERT row trigger, so it gets no queue
--   row, as before.
-- * The content trigger first tests one conjunction that a plain row (its own subject and body, no template,
--   no custom headers or attachments, short metadata, the states a new row has) passes, and that implies every
--   rule of email_deliveries_checked_size and email_deliveries_check_states: such a row skips the two calls,
--   each of which copied the whole row into a composite value and judged it rule by rule. A row the
--   conjunction does not pass, for whatever reason, is judged by those two functions exactly as before, and
--   they stay the one home of each rule and of its error. The content size has one home too,
--   email_deliveries_content_size, which both paths return.
--
-- Hot path: no index, column or constraint changes; the claim and the outcome write are untouched (the claim
-- session's UPDATEs fire neither trigger).

-- The octets of a row's content, as the daemon's max_message_bytes bound counts them. STABLE, as
-- array_to_string is: PostgreSQL inlines a SQL function into the expression that calls it only when the
-- function is declared no less volatile than its body, and a call that is not inlined costs the INSERT more
-- than all the rules it skips (measured: 40 us more than schema 29 when declared IMMUTABLE).
CREATE FUNCTION email_deliveries_content_size(subject text, text_body text, html_body text, to_addresses text[],
                                              cc_addresses text[], bcc_addresses text[], headers jsonb,
                                              attachments jsonb, metadata jsonb, template_data jsonb)
RETURNS bigint LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(octet_length(subject), 0)::bigint
        + coalesce(octet_length(text_body), 0) + coalesce(octet_length(html_body), 0)
        + coalesce(octet_length(array_to_string(to_addresses, ' ')), 0)
        + coalesce(octet_length(array_to_string(cc_addresses, ' ')), 0)
        + coalesce(octet_length(array_to_string(bcc_addresses, ' ')), 0)
        + coalesce(octet_length(headers::text), 0)
        + coalesce(octet_length(attachments::text), 0)
        + coalesce(octet_length(metadata::text), 0)
        + coalesce(octet_length(template_data::text), 0)
$$;

-- Schema 29's body; only its RETURN changes, to the function above.

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
    -- schema 29: exactly one of own content, a stored template, a provider template
    IF d.template IS NULL AND d.provider_template IS NULL THEN
        IF d.template_data IS NOT NULL OR d.locale IS NOT NULL OR d.template_version IS NOT NULL THEN
            PERFORM email_deliveries_refuse('email_deliveries_content_or_template');
        END IF;
    ELSIF d.subject IS NOT NULL OR d.text_body IS NOT NULL OR d.html_body IS NOT NULL
          OR (d.provider_template IS NOT NULL AND (d.template IS NOT NULL OR d.locale IS NOT NULL
                                                   OR d.template_version IS NOT NULL)) THEN
        PERFORM email_deliveries_refuse('email_deliveries_content_or_template');
    ELSIF jsonb_typeof(d.template_data) IS DISTINCT FROM 'object'
          AND NOT (d.provider_template IS NOT NULL AND d.template_data IS NULL) THEN
        PERFORM email_deliveries_refuse('email_deliveries_template_data_object');
    END IF;
    -- end of schema 29's change
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
    IF d.template IS NULL AND d.provider_template IS NULL  -- schema 29: or a provider template
       AND d.text_body IS NULL AND d.html_body IS NULL THEN
        PERFORM email_deliveries_refuse('email_deliveries_has_body');
    END IF;
    IF NOT (cardinality(d.to_addresses) >= 1 AND array_position(d.to_addresses, NULL) IS NULL) THEN
        PERFORM email_deliveries_refuse('email_deliveries_has_recipient');
    END IF;
    IF d.template IS NULL AND d.provider_template IS NULL  -- schema 29: or a provider template
       AND d.subject IS NULL THEN
        PERFORM email_deliveries_refuse('email_deliveries_has_subject');
    END IF;
    IF jsonb_typeof(d.headers) <> 'object' THEN
        PERFORM email_deliveries_refuse('email_deliveries_headers_object');
    END IF;
    IF jsonb_typeof(d.metadata) <> 'object' THEN
        PERFORM email_deliveries_refuse('email_deliveries_metadata_object');
    END IF;
    -- schema 29: the provider template's name
    IF NOT (d.provider_template IS NULL
            OR (char_length(d.provider_template) BETWEEN 1 AND 255 AND d.provider_template !~ '[[:cntrl:]]')) THEN
        PERFORM email_deliveries_refuse('email_deliveries_provider_template_valid');
    END IF;
    IF NOT (d.transport IS NULL OR (char_length(d.transport) BETWEEN 1 AND 64 AND d.transport !~ '[[:cntrl:]]')) THEN
        PERFORM email_deliveries_refuse('email_deliveries_transport_valid');
    END IF;
    FOREACH field IN ARRAY ARRAY['headers', 'attachments', 'metadata', 'template_data'] LOOP
        doc := CASE field WHEN 'headers' THEN d.headers WHEN 'attachments' THEN d.attachments
                          WHEN 'metadata' THEN d.metadata ELSE d.template_data END;
        CONTINUE WHEN doc IS NULL;
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
    RETURN email_deliveries_content_size(d.subject, d.text_body, d.html_body, d.to_addresses, d.cc_addresses,
                                         d.bcc_addresses, d.headers, d.attachments, d.metadata, d.template_data);
END;
$$;


CREATE OR REPLACE FUNCTION email_deliveries_check_content() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    resolved record;
    plain boolean;
BEGIN
    IF NEW.template IS NOT NULL THEN
        NEW.template_data := coalesce(NEW.template_data, '{}');
        IF NEW.subject IS NULL AND NEW.text_body IS NULL AND NEW.html_body IS NULL THEN
            resolved := email_templates_resolve(NEW.template, NEW.locale, NEW.template_version);
            NEW.locale := resolved.locale;
            NEW.template_version := resolved.version;
        END IF;
    END IF;
    -- schema 30: a plain row passes every rule of the two functions below if it passes this conjunction
    -- (each term implies one of their rules; metadata shorter than 66 characters can neither nest 33 levels
    -- nor hold a number of 301 digits); any other row, or one that breaks a rule, is judged by them
    plain := (NEW.template IS NULL AND NEW.provider_template IS NULL AND NEW.template_data IS NULL
        AND NEW.locale IS NULL AND NEW.template_version IS NULL
        AND NEW.subject IS NOT NULL AND (NEW.text_body IS NOT NULL OR NEW.html_body IS NOT NULL)
        AND array_ndims(NEW.to_addresses) = 1 AND cardinality(NEW.to_addresses) >= 1
        AND array_position(NEW.to_addresses, NULL) IS NULL
        AND coalesce(array_ndims(NEW.cc_addresses), 1) = 1 AND array_position(NEW.cc_addresses, NULL) IS NULL
        AND coalesce(array_ndims(NEW.bcc_addresses), 1) = 1 AND array_position(NEW.bcc_addresses, NULL) IS NULL
        AND NEW.headers = '{}' AND NEW.attachments = '[]'
        AND jsonb_typeof(NEW.metadata) = 'object' AND octet_length(NEW.metadata::text) < 66
        AND NEW.created_at >= '1900-01-01 00:00+00' AND NEW.created_at < '9999-01-01 00:00+00'
        AND char_length(NEW.dedupe_key) BETWEEN 1 AND 255 AND NEW.dedupe_key !~ '[[:cntrl:]]'
        AND NEW.expires_at IS NULL
        AND (NEW.transport IS NULL
             OR (char_length(NEW.transport) BETWEEN 1 AND 64 AND NEW.transport !~ '[[:cntrl:]]'))
        AND NEW.attempts >= 0 AND (NEW.max_attempts IS NULL OR NEW.max_attempts >= 1)
        AND NEW.status = 'pending' AND NEW.claim_token IS NULL AND NEW.claimed_at IS NULL
        AND NEW.sent_at IS NULL AND NEW.delivery_event IS NULL
        AND NEW.scheduled_at >= '1900-01-01 00:00+00' AND NEW.scheduled_at < '9999-01-01 00:00+00'
        AND NEW.updated_at >= '1900-01-01 00:00+00' AND NEW.updated_at < '9999-01-01 00:00+00') IS TRUE;
    IF plain THEN
        NEW.content_bytes := email_deliveries_content_size(NEW.subject, NEW.text_body, NEW.html_body,
            NEW.to_addresses, NEW.cc_addresses, NEW.bcc_addresses, NEW.headers, NEW.attachments, NEW.metadata,
            NEW.template_data);
    ELSE
        NEW.content_bytes := email_deliveries_checked_size(NEW);
    END IF;
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
    IF NOT plain THEN  -- schema 30: the plain row's states were judged by the conjunction
        PERFORM email_deliveries_check_states(NEW);
    END IF;
    IF NEW.unsubscribe_category IS NOT NULL THEN  -- schema 28
        PERFORM email_deliveries_check_unsubscribe(NEW);
    END IF;
    RETURN NEW;
END;
$fn$;

-- The queue row of each pending row inserted, and a notification when one is due now (at COMMIT, once per
-- transaction). SECURITY DEFINER, so an application role that may only INSERT into email_deliveries needs no
-- grant on email_queue; search_path pinned to the one the migration ran with.
CREATE FUNCTION email_deliveries_queue_inserted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    IF NEW.status = 'pending' THEN
        INSERT INTO email_queue (delivery_id, priority, scheduled_at, transport)
        VALUES (NEW.id, NEW.priority, NEW.scheduled_at, NEW.transport);
        IF NEW.scheduled_at <= now() THEN
            PERFORM pg_notify('outbox_mailer', '');
        END IF;
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER email_deliveries_notify_insert ON email_deliveries;
CREATE TRIGGER email_deliveries_notify_insert
    AFTER INSERT ON email_deliveries
    FOR EACH ROW EXECUTE FUNCTION email_deliveries_queue_inserted();
DROP FUNCTION email_deliveries_notify();
