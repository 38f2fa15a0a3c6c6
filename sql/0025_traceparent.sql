-- outbox-mailer schema, version 25: the trace an email belongs to (docs/tracing.md).
--
-- email_deliveries.traceparent: the W3C Trace Context header of the application's span when it
-- enqueued the row (version 00: 00-<32 hex trace-id>-<16 hex parent-id>-<2 hex trace-flags>, lower case,
-- trace-id and parent-id not all zeros); null: no trace. Written by the application (the Python client
-- and the Django backend fill it from the current OpenTelemetry span), read by the claim; the daemon
-- continues that trace with a span per attempt, the webhook receiver with one per delivery event.
--
-- Refused at INSERT, like schema 12's checks (SQLSTATE 23514, the constraint
-- email_deliveries_traceparent_valid, COLUMN traceparent, a DETAIL saying why), and by an UPDATE that
-- writes it; the daemon never writes it, so its claim and outcome write never check it. In the content
-- trigger's functions, not a CHECK constraint: PostgreSQL evaluates a CHECK on every UPDATE, the claim's
-- and the outcome write's included (the hot path).
--
-- The hot-path rule: no index covers it. It is the table's last column and the daemon never changes
-- it, so an update's WAL record leaves it out with the rest of the unchanged end of the row.

ALTER TABLE email_deliveries ADD COLUMN traceparent text;

COMMENT ON COLUMN email_deliveries.traceparent IS
    'application-owned: W3C traceparent of the span that enqueued the email (null: none); checked at INSERT';

-- The one SQL form of a traceparent (the client's check, outbox_mailer/tracing/traceparent.py, is the
-- same rule).
CREATE FUNCTION email_deliveries_check_traceparent(value text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF value !~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$' THEN
        PERFORM email_deliveries_refuse_field('email_deliveries_traceparent_valid', 'traceparent',
            'traceparent ' || left(to_jsonb(value)::text, 80)
            || ': W3C Trace Context, 00-<32 hex trace-id>-<16 hex parent-id>-<2 hex flags>, lower case');
    ELSIF substr(value, 4, 32) = repeat('0', 32) THEN
        PERFORM email_deliveries_refuse_field('email_deliveries_traceparent_valid', 'traceparent',
            'traceparent ' || to_jsonb(value)::text || ': an all-zero trace-id is invalid');
    ELSIF substr(value, 37, 16) = repeat('0', 16) THEN
        PERFORM email_deliveries_refuse_field('email_deliveries_traceparent_valid', 'traceparent',
            'traceparent ' || to_jsonb(value)::text || ': an all-zero parent-id is invalid');
    END IF;
END;
$$;

-- On INSERT: as schema 23's, and the traceparent when there is one.
CREATE OR REPLACE FUNCTION email_deliveries_check_content() RETURNS trigger
LANGUAGE plpgsql AS $$
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
    IF NEW.traceparent IS NOT NULL THEN
        PERFORM email_deliveries_check_traceparent(NEW.traceparent);
    END IF;
    RETURN NEW;
END;
$$;

-- An UPDATE that writes the traceparent (never the daemon's) is checked like an INSERT.
CREATE FUNCTION email_deliveries_recheck_traceparent() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM email_deliveries_check_traceparent(NEW.traceparent);
    RETURN NULL;
END;
$$;

CREATE TRIGGER email_deliveries_recheck_traceparent
    AFTER UPDATE OF traceparent ON email_deliveries
    FOR EACH ROW WHEN (NEW.traceparent IS DISTINCT FROM OLD.traceparent AND NEW.traceparent IS NOT NULL)
    EXECUTE FUNCTION email_deliveries_recheck_traceparent();
