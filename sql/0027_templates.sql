-- outbox-mailer schema, version 27: templates kept in the database, named by rows (docs/templates.md).
--
-- email_templates holds immutable versions: adding a template under an existing name and locale adds a
-- version; a version once written is never changed nor deleted (a row may name it for as long as the row
-- exists, and every attempt of that row must render the same bytes). The default locale of a template is
-- the locale of its first version (the lowest id under its name).
--
-- A row of email_deliveries gives either its own subject and body or a template (template, template_data,
-- locale, template_version), never both. Today's rule (a subject NOT NULL, a body required) moves into
-- the content trigger with the new one: CHECK constraints run on every update of the hot path. The
-- INSERT resolves the version in force (exact locale, then its language, then the template's default
-- locale; a template_version given by the application is checked to exist) and writes the locale and
-- version it resolved on the row, so every attempt renders that version whatever is added later. A
-- row naming a template that does not exist is refused at INSERT, naming it.
--
-- Hot path: no index changes on email_deliveries; the claim and the outcome write set none of the new
-- columns, so the recheck trigger (AFTER UPDATE OF the content columns) never fires in them.

CREATE TABLE email_templates (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text        NOT NULL,
    locale      text        NOT NULL,
    version     integer     NOT NULL,
    subject     text        NOT NULL,
    text_body   text,
    html_body   text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    created_by  text        NOT NULL,
    CONSTRAINT email_templates_version_unique UNIQUE (name, locale, version),
    CONSTRAINT email_templates_name_valid
        CHECK (char_length(name) BETWEEN 1 AND 255 AND name !~ '[[:cntrl:]]'),
    CONSTRAINT email_templates_locale_valid CHECK (locale ~ '^[A-Za-z]{2,8}(-[A-Za-z0-9]{1,8})*$'),
    CONSTRAINT email_templates_version_positive CHECK (version >= 1),
    CONSTRAINT email_templates_has_body CHECK (text_body IS NOT NULL OR html_body IS NOT NULL)
);
COMMENT ON TABLE email_templates IS
    'outbox-mailer: immutable template versions by (name, locale, version); rows of email_deliveries name them (schema 27)';

CREATE FUNCTION email_templates_immutable() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'email_templates: template %, locale %, version % is immutable (add a new version instead)',
        OLD.name, OLD.locale, OLD.version
        USING ERRCODE = 'check_violation', CONSTRAINT = 'email_templates_immutable', TABLE = 'email_templates';
END;
$$;
CREATE TRIGGER email_templates_immutable BEFORE UPDATE OR DELETE ON email_templates
    FOR EACH ROW EXECUTE FUNCTION email_templates_immutable();
CREATE TRIGGER email_templates_no_truncate BEFORE TRUNCATE ON email_templates
    FOR EACH STATEMENT EXECUTE FUNCTION email_templates_immutable();

ALTER TABLE email_deliveries
    ALTER COLUMN subject DROP NOT NULL,
    ADD COLUMN template         text,
    ADD COLUMN template_data    jsonb,
    ADD COLUMN locale           text,
    ADD COLUMN template_version integer;
COMMENT ON COLUMN email_deliveries.template IS
    'app-owned: the name of an email_templates template; then subject and bodies are null (schema 27)';
COMMENT ON COLUMN email_deliveries.locale IS
    'app-owned, resolved at INSERT: the locale asked for, replaced by the locale of the version resolved';
COMMENT ON COLUMN email_deliveries.template_version IS
    'resolved at INSERT (or given by the app and checked): the template version every attempt renders';

-- The version a row renders: the first locale of (locale, its language, the template's default locale)
-- that has the version asked for (or any, without one), and its latest version there. SECURITY DEFINER:
-- an application that may only insert needs no grant on email_templates (search_path pinned to the one
-- the migration ran with, as every SECURITY DEFINER function here).
CREATE FUNCTION email_templates_resolve(p_name text, p_locale text, p_version integer,
                                        OUT locale text, OUT version integer)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    candidate text;
BEGIN
    FOREACH candidate IN ARRAY ARRAY[p_locale, split_part(p_locale, '-', 1),
            (SELECT t.locale FROM email_templates t WHERE t.name = p_name ORDER BY t.id LIMIT 1)] LOOP
        CONTINUE WHEN candidate IS NULL OR candidate = '';
        SELECT t.locale, t.version INTO locale, version FROM email_templates t
        WHERE t.name = p_name AND t.locale = candidate AND (p_version IS NULL OR t.version = p_version)
        ORDER BY t.version DESC LIMIT 1;
        IF FOUND THEN
            RETURN;
        END IF;
    END LOOP;
    IF NOT EXISTS (SELECT FROM email_templates t WHERE t.name = p_name) THEN
        RAISE EXCEPTION 'email_deliveries.template: no template named "%"', p_name
            USING ERRCODE = 'check_violation', CONSTRAINT = 'email_deliveries_template_known',
                  TABLE = 'email_deliveries', COLUMN = 'template';
    END IF;
    RAISE EXCEPTION 'email_deliveries.template_version: template "%" has no version % for locale %',
        p_name, coalesce(p_version::text, '(any)'), coalesce(p_locale, '(default)')
        USING ERRCODE = 'check_violation', CONSTRAINT = 'email_deliveries_template_known',
              TABLE = 'email_deliveries', COLUMN = 'template_version';
END;
$$;

-- Schema 8's size check and content rules, with the content rule of schema 27: own subject and body,
-- or a template, never both.
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
    IF d.template IS NULL THEN
        IF d.template_data IS NOT NULL OR d.locale IS NOT NULL OR d.template_version IS NOT NULL THEN
            PERFORM email_deliveries_refuse('email_deliveries_content_or_template');
        END IF;
    ELSIF d.subject IS NOT NULL OR d.text_body IS NOT NULL OR d.html_body IS NOT NULL THEN
        PERFORM email_deliveries_refuse('email_deliveries_content_or_template');
    ELSIF jsonb_typeof(d.template_data) IS DISTINCT FROM 'object' THEN
        PERFORM email_deliveries_refuse('email_deliveries_template_data_object');
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
    IF d.template IS NULL AND d.text_body IS NULL AND d.html_body IS NULL THEN
        PERFORM email_deliveries_refuse('email_deliveries_has_body');
    END IF;
    IF NOT (cardinality(d.to_addresses) >= 1 AND array_position(d.to_addresses, NULL) IS NULL) THEN
        PERFORM email_deliveries_refuse('email_deliveries_has_recipient');
    END IF;
    IF d.template IS NULL AND d.subject IS NULL THEN
        PERFORM email_deliveries_refuse('email_deliveries_has_subject');
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
    RETURN coalesce(octet_length(d.subject), 0)
        + coalesce(octet_length(d.text_body), 0) + coalesce(octet_length(d.html_body), 0)
        + coalesce(octet_length(array_to_string(d.to_addresses, ' ')), 0)
        + coalesce(octet_length(array_to_string(d.cc_addresses, ' ')), 0)
        + coalesce(octet_length(array_to_string(d.bcc_addresses, ' ')), 0)
        + coalesce(octet_length(d.headers::text), 0)
        + coalesce(octet_length(d.attachments::text), 0)
        + coalesce(octet_length(d.metadata::text), 0)
        + coalesce(octet_length(d.template_data::text), 0);
END;
$$;

-- the content trigger's function as schema 26 left it, plus the template's resolution
CREATE OR REPLACE FUNCTION email_deliveries_check_content() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    resolved record;
BEGIN
    IF NEW.template IS NOT NULL THEN
        NEW.template_data := coalesce(NEW.template_data, '{}');
        IF NEW.subject IS NULL AND NEW.text_body IS NULL AND NEW.html_body IS NULL THEN
            resolved := email_templates_resolve(NEW.template, NEW.locale, NEW.template_version);
            NEW.locale := resolved.locale;
            NEW.template_version := resolved.version;
        END IF;
    END IF;
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

-- After an UPDATE of the content: schema 12's checks, and a template named anew must exist as named.
CREATE OR REPLACE FUNCTION email_deliveries_recheck_content() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM email_deliveries_refuse_hostile(
        CASE WHEN NEW.subject IS DISTINCT FROM OLD.subject THEN NEW.subject END,
        CASE WHEN NEW.from_address IS DISTINCT FROM OLD.from_address THEN NEW.from_address END,
        CASE WHEN NEW.reply_to IS DISTINCT FROM OLD.reply_to THEN NEW.reply_to END,
        CASE WHEN NEW.to_addresses IS DISTINCT FROM OLD.to_addresses THEN NEW.to_addresses END,
        CASE WHEN NEW.cc_addresses IS DISTINCT FROM OLD.cc_addresses THEN NEW.cc_addresses END,
        CASE WHEN NEW.bcc_addresses IS DISTINCT FROM OLD.bcc_addresses THEN NEW.bcc_addresses END,
        CASE WHEN NEW.headers IS DISTINCT FROM OLD.headers THEN NEW.headers END,
        CASE WHEN NEW.attachments IS DISTINCT FROM OLD.attachments THEN NEW.attachments END);
    IF NEW.template IS NOT NULL AND (NEW.template, NEW.locale, NEW.template_version)
            IS DISTINCT FROM (OLD.template, OLD.locale, OLD.template_version)
       AND (email_templates_resolve(NEW.template, NEW.locale, NEW.template_version)).locale
            IS DISTINCT FROM NEW.locale THEN
        RAISE EXCEPTION 'email_deliveries.template: template "%" has no version % for locale %',
            NEW.template, NEW.template_version, NEW.locale
            USING ERRCODE = 'check_violation', CONSTRAINT = 'email_deliveries_template_known',
                  TABLE = 'email_deliveries', COLUMN = 'template';
    END IF;
    UPDATE email_deliveries SET content_bytes = email_deliveries_checked_size(NEW) WHERE id = NEW.id;
    RETURN NULL;
END;
$$;

DROP TRIGGER email_deliveries_recheck_content ON email_deliveries;
CREATE TRIGGER email_deliveries_recheck_content
    AFTER UPDATE OF dedupe_key, from_address, reply_to, subject, text_body, html_body, to_addresses,
                    cc_addresses, bcc_addresses, headers, attachments, metadata, transport, expires_at,
                    created_at, template, template_data, locale, template_version
    ON email_deliveries
    FOR EACH ROW EXECUTE FUNCTION email_deliveries_recheck_content();
