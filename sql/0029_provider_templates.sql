-- outbox-mailer schema, version 29: rows that name a provider's own template (docs/templates.md, "Provider
-- templates").
--
-- provider_template is the alias or id of a template kept at the provider (Postmark's TemplateAlias or
-- TemplateId, a SendGrid dynamic template's id), which the provider renders with template_data as its model.
-- A row gives exactly one of: its own subject and body, a stored template (schema 27), or a provider template.
-- A provider-template row has no subject, no body, no locale and no template_version; its template_data is an
-- object, or null for no model (the daemon sends {}). The name is 1-255 characters without control characters.
--
-- The rule is in the content check that the INSERT trigger calls (email_deliveries_checked_size, from schema
-- 27's body; each change is marked "schema 29"); the trigger's own function is left as it is.
--
-- Hot path: no index, no constraint; the claim returns the column with the row and no UPDATE of the hot
-- path sets it, so the recheck trigger (AFTER UPDATE OF the content columns) never fires there.

ALTER TABLE email_deliveries ADD COLUMN provider_template text;
COMMENT ON COLUMN email_deliveries.provider_template IS
    'app-owned: the alias or id of a template kept at the provider, rendered there with template_data; then subject, bodies and template are null (schema 29)';

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

-- An UPDATE of the provider template is checked like one of the other content columns.
DROP TRIGGER email_deliveries_recheck_content ON email_deliveries;
CREATE TRIGGER email_deliveries_recheck_content
    AFTER UPDATE OF dedupe_key, from_address, reply_to, subject, text_body, html_body, to_addresses,
                    cc_addresses, bcc_addresses, headers, attachments, metadata, transport, expires_at,
                    created_at, template, template_data, locale, template_version, provider_template
    ON email_deliveries
    FOR EACH ROW EXECUTE FUNCTION email_deliveries_recheck_content();
