-- outbox-mailer schema, version 28: one-click unsubscribe (RFC 8058) and suppression scopes
-- (docs/unsubscribe.md).
--
-- 1. email_deliveries.unsubscribe_category (application-owned, null: no List-Unsubscribe): a row that
--    names a category gets List-Unsubscribe with a signed HTTPS URL and List-Unsubscribe-Post from the
--    daemon; a POST to that URL suppresses its recipient for that category only. Refused at INSERT
--    (SQLSTATE 23514, in the content trigger, not a CHECK: the hot path's UPDATEs evaluate no CHECK,
--    schema 26) when the category is not 1-64 of a-z 0-9 . _ - (starting with a letter or digit), when
--    the row has more than one recipient (To, Cc and Bcc: one token would let a Cc recipient unsubscribe
--    the To address), or when the row's own headers already hold List-Unsubscribe(-Post).
--    No index covers it, the daemon never changes it, and it is the table's last column: an update's WAL
--    record leaves it out with the rest of the unchanged end of the row (the hot-path rule).
-- 2. email_suppressions.scope: '' suppresses all mail to the address (hard bounces, complaints, an
--    operator's), a category only the rows that name it. The primary key becomes (address, scope), so
--    the daemon's look-up by address still walks it.

ALTER TABLE email_deliveries ADD COLUMN unsubscribe_category text;
COMMENT ON COLUMN email_deliveries.unsubscribe_category IS
    'application-owned: the unsubscribe category of a single-recipient email (List-Unsubscribe, RFC 8058); null: none';

-- The one SQL form of a category (delivery_events/unsubscribe.py's CATEGORY is the same rule).
CREATE FUNCTION email_unsubscribe_category_valid(value text) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT value ~ '^[a-z0-9][a-z0-9._-]{0,63}$'
$$;

CREATE FUNCTION email_deliveries_check_unsubscribe(d email_deliveries) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT email_unsubscribe_category_valid(d.unsubscribe_category) THEN
        PERFORM email_deliveries_refuse_field('email_deliveries_unsubscribe_category_valid', 'unsubscribe_category',
            'unsubscribe_category ' || left(to_jsonb(d.unsubscribe_category)::text, 80)
            || ': 1-64 characters of a-z 0-9 . _ -, starting with a letter or digit');
    ELSIF cardinality(d.to_addresses) + cardinality(d.cc_addresses) + cardinality(d.bcc_addresses) <> 1 THEN
        PERFORM email_deliveries_refuse_field('email_deliveries_unsubscribe_single_recipient', 'unsubscribe_category',
            'unsubscribe_category needs exactly one recipient (To, Cc and Bcc together): one unsubscribe link '
            || 'would let any recipient unsubscribe the others');
    ELSIF EXISTS (SELECT 1 FROM jsonb_object_keys(d.headers) AS k
                  WHERE lower(k) IN ('list-unsubscribe', 'list-unsubscribe-post')) THEN
        PERFORM email_deliveries_refuse_field('email_deliveries_unsubscribe_headers', 'headers',
            'a row with unsubscribe_category gets List-Unsubscribe and List-Unsubscribe-Post from the daemon; '
            || 'its headers may not hold them');
    END IF;
END;
$$;

-- the content trigger's function as schema 27 left it (templates), plus the block marked "schema 28"
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
    -- schema 28 (one-click unsubscribe): the one addition to 0027's body
    IF NEW.unsubscribe_category IS NOT NULL THEN
        PERFORM email_deliveries_check_unsubscribe(NEW);
    END IF;
    RETURN NEW;
END;
$fn$;

ALTER TABLE email_suppressions ADD COLUMN scope text NOT NULL DEFAULT '';
ALTER TABLE email_suppressions
    ADD CONSTRAINT email_suppressions_scope_valid CHECK (scope = '' OR email_unsubscribe_category_valid(scope)),
    DROP CONSTRAINT email_suppressions_pkey,
    ADD PRIMARY KEY (address, scope);
COMMENT ON COLUMN email_suppressions.scope IS
    'empty: all mail to the address; else the unsubscribe category whose rows alone it suppresses';

-- Suppress an address for one scope; an existing suppression of that address and scope is replaced.
CREATE FUNCTION email_suppress(address text, reason text, source text, expires_at timestamptz, scope text)
RETURNS SETOF email_suppressions LANGUAGE sql AS $$
    INSERT INTO email_suppressions (address, reason, source, expires_at, scope) VALUES ($1, $2, $3, $4, $5)
    ON CONFLICT (address, scope) DO UPDATE
        SET reason = EXCLUDED.reason, source = EXCLUDED.source, expires_at = EXCLUDED.expires_at,
            created_at = now(), delivery_id = NULL
    RETURNING *;
$$;

-- The four-argument form (every caller before this schema): all mail.
CREATE OR REPLACE FUNCTION email_suppress(address text, reason text, source text, expires_at timestamptz)
RETURNS SETOF email_suppressions LANGUAGE sql AS $$
    SELECT * FROM email_suppress($1, $2, $3, $4, '');
$$;

REVOKE EXECUTE ON FUNCTION email_suppress(text, text, text, timestamptz, text) FROM PUBLIC;
