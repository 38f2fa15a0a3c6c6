-- outbox-mailer schema, version 23: inline attachments, an attachment's optional content_id.
--
-- An attachments entry may carry "content_id", the Content-ID of an inline part (an image the HTML
-- shows as <img src="cid:logo@example.com">), written without its angle brackets; the daemon sends
-- such a part as Content-ID: <logo@example.com>, Content-Disposition: inline, in multipart/related
-- with the HTML (outbox_mailer/message/mime.py). null, or no key, is an ordinary attachment.
-- Refused at INSERT, like schema 12's checks (SQLSTATE 23514, the constraint, a DETAIL naming
-- attachments[i].content_id):
--
--   email_deliveries_attachments_entries_keys        a key other than filename, content_type,
--                                                    content_base64 and content_id
--   email_deliveries_attachments_entries_strings     a content_id that is not a JSON string or null
--   email_deliveries_attachments_content_id_valid    a control character, angle brackets, or not
--                                                    1-250 of letters, digits and
--                                                    !#$%&'*+-/=?^_`{|}~. on each side of at most
--                                                    one @ (RFC 2392's id-left@id-right; clients
--                                                    also resolve an id without @, such as logo)
--   email_deliveries_attachments_content_id_unique   a content_id used twice in one row
--
-- The daemon judges a content_id by the same rule (outbox_mailer/message/compose.py), so a row
-- written past these checks fails when composed, with the same field named.
--
-- In the content trigger's functions, not a CHECK constraint: PostgreSQL evaluates a CHECK on
-- every UPDATE, the claim's and the outcome write's included (the hot path), and these run on
-- INSERT and after an UPDATE of the content only (schema 12 says more). A row without a
-- content_id is found so by one more JSON path over its attachments, and only when it has any.
-- Rows already in the table are neither read nor changed; no index, no new column.

-- The checks of schema 12, with an attachment's content_id.
CREATE OR REPLACE FUNCTION email_deliveries_refuse_hostile(
    p_subject text, p_from_address text, p_reply_to text, p_to_addresses text[], p_cc_addresses text[],
    p_bcc_addresses text[], p_headers jsonb, p_attachments jsonb) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    field text;
    item text;
    items text[];
    i integer;
    header_name text;
    header_value jsonb;
    entry jsonb;
    content_id text;
    content_ids jsonb;
BEGIN
    IF email_deliveries_control_character(p_subject) IS NOT NULL THEN
        PERFORM email_deliveries_refuse_field('email_deliveries_subject_no_control_chars', 'subject',
            'subject holds ' || email_deliveries_describe_control(p_subject));
    END IF;
    IF email_deliveries_control_character(p_from_address) IS NOT NULL THEN
        PERFORM email_deliveries_refuse_field('email_deliveries_from_address_no_control_chars', 'from_address',
            'from_address holds ' || email_deliveries_describe_control(p_from_address));
    END IF;
    IF email_deliveries_control_character(p_reply_to) IS NOT NULL THEN
        PERFORM email_deliveries_refuse_field('email_deliveries_reply_to_no_control_chars', 'reply_to',
            'reply_to holds ' || email_deliveries_describe_control(p_reply_to));
    END IF;
    -- Addresses: one regular expression over the joined elements; each element only on a match.
    FOREACH field IN ARRAY ARRAY['to_addresses', 'cc_addresses', 'bcc_addresses'] LOOP
        items := CASE field WHEN 'to_addresses' THEN p_to_addresses WHEN 'cc_addresses' THEN p_cc_addresses
                            ELSE p_bcc_addresses END;
        IF email_deliveries_control_character(array_to_string(items, ' ')) IS NOT NULL THEN
            i := 0;
            FOREACH item IN ARRAY items LOOP
                IF email_deliveries_control_character(item) IS NOT NULL THEN
                    PERFORM email_deliveries_refuse_field('email_deliveries_' || field || '_no_control_chars', field,
                        field || '[' || i || '] holds ' || email_deliveries_describe_control(item));
                END IF;
                i := i + 1;
            END LOOP;
        END IF;
    END LOOP;
    -- headers: an object (schema 8's check ran before); its names and values.
    IF p_headers <> '{}'::jsonb THEN
        FOR header_name, header_value IN SELECT h.key, h.value FROM jsonb_each(p_headers) AS h LOOP
            IF header_name !~ '^[!-9;-~]{1,76}$' THEN
                PERFORM email_deliveries_refuse_field('email_deliveries_header_names_valid', 'headers',
                    'header name ' || to_jsonb(header_name)::text
                    || ': 1-76 printable ASCII characters, no colon or space');
            END IF;
            IF jsonb_typeof(header_value) <> 'string' THEN
                PERFORM email_deliveries_refuse_field('email_deliveries_header_values_strings', 'headers',
                    'headers.' || header_name || ' is a JSON ' || jsonb_typeof(header_value) || ', not a string');
            END IF;
            IF email_deliveries_control_character(header_value #>> '{}') IS NOT NULL THEN
                PERFORM email_deliveries_refuse_field('email_deliveries_header_values_no_control_chars', 'headers',
                    'headers.' || header_name || ' holds '
                    || email_deliveries_describe_control(header_value #>> '{}'));
            END IF;
        END LOOP;
    END IF;
    -- attachments: an array (schema 8's check ran before) of {filename, content_type, content_base64}
    -- and, for an inline part, content_id.
    IF p_attachments <> '[]'::jsonb THEN
        i := 0;
        content_ids := '{}';
        FOR entry IN SELECT a.value FROM jsonb_array_elements(p_attachments) AS a LOOP
            IF jsonb_typeof(entry) <> 'object' THEN
                PERFORM email_deliveries_refuse_field('email_deliveries_attachments_entries_object', 'attachments',
                    'attachments[' || i || '] is a JSON ' || jsonb_typeof(entry) || ', not an object');
            END IF;
            IF NOT entry ?& ARRAY['filename', 'content_type', 'content_base64'] THEN
                PERFORM email_deliveries_refuse_field('email_deliveries_attachments_entries_keys', 'attachments',
                    'attachments[' || i || '] has no ' || (
                        SELECT string_agg(k, ', ' ORDER BY k)
                        FROM unnest(ARRAY['content_base64', 'content_type', 'filename']) AS k
                        WHERE NOT entry ? k));
            END IF;
            IF EXISTS (SELECT FROM jsonb_object_keys(entry) AS k
                       WHERE k NOT IN ('filename', 'content_type', 'content_base64', 'content_id')) THEN
                PERFORM email_deliveries_refuse_field('email_deliveries_attachments_entries_keys', 'attachments',
                    'attachments[' || i || '] has unknown keys: ' || (
                        SELECT string_agg(to_jsonb(k)::text, ', ' ORDER BY k)
                        FROM jsonb_object_keys(entry) AS k
                        WHERE k NOT IN ('filename', 'content_type', 'content_base64', 'content_id')));
            END IF;
            FOREACH field IN ARRAY ARRAY['content_base64', 'content_type', 'filename'] LOOP
                IF jsonb_typeof(entry -> field) <> 'string' THEN
                    PERFORM email_deliveries_refuse_field('email_deliveries_attachments_entries_strings', 'attachments',
                        'attachments[' || i || '].' || field || ' is a JSON ' || jsonb_typeof(entry -> field)
                        || ', not a string');
                END IF;
            END LOOP;
            IF email_deliveries_control_character(entry ->> 'filename') IS NOT NULL THEN
                PERFORM email_deliveries_refuse_field('email_deliveries_attachments_filename_no_control_chars',
                    'attachments', 'attachments[' || i || '].filename holds '
                    || email_deliveries_describe_control(entry ->> 'filename'));
            END IF;
            IF jsonb_typeof(entry -> 'content_id') NOT IN ('string', 'null') THEN
                PERFORM email_deliveries_refuse_field('email_deliveries_attachments_entries_strings', 'attachments',
                    'attachments[' || i || '].content_id is a JSON ' || jsonb_typeof(entry -> 'content_id')
                    || ', not a string');
            END IF;
            content_id := entry ->> 'content_id';
            IF content_id IS NOT NULL THEN
                IF email_deliveries_control_character(content_id) IS NOT NULL THEN
                    PERFORM email_deliveries_refuse_field('email_deliveries_attachments_content_id_valid',
                        'attachments', 'attachments[' || i || '].content_id holds '
                        || email_deliveries_describe_control(content_id));
                END IF;
                IF content_id ~ '[<>]' THEN
                    PERFORM email_deliveries_refuse_field('email_deliveries_attachments_content_id_valid',
                        'attachments', 'attachments[' || i || '].content_id ' || to_jsonb(content_id)::text
                        || ': write the id without angle brackets (logo@example.com becomes '
                        || 'Content-ID: <logo@example.com>)');
                END IF;
                IF char_length(content_id) NOT BETWEEN 1 AND 250
                   OR content_id !~ '^[A-Za-z0-9!#$%&''*+/=?^_`{|}~.-]+(@[A-Za-z0-9!#$%&''*+/=?^_`{|}~.-]+)?$' THEN
                    PERFORM email_deliveries_refuse_field('email_deliveries_attachments_content_id_valid',
                        'attachments', 'attachments[' || i || '].content_id ' || to_jsonb(content_id)::text
                        || ': 1-250 letters, digits and !#$%&''*+-/=?^_`{|}~. on each side of at most one @ '
                        || '(RFC 2392: id-left@id-right)');
                END IF;
                IF content_ids ? content_id THEN
                    PERFORM email_deliveries_refuse_field('email_deliveries_attachments_content_id_unique',
                        'attachments', 'attachments[' || i || '].content_id ' || to_jsonb(content_id)::text
                        || ' is also attachments[' || (content_ids ->> content_id) || ']''s');
                END IF;
                content_ids := content_ids || jsonb_build_object(content_id, i);
            END IF;
            i := i + 1;
        END LOOP;
    END IF;
END;
$fn$;

-- On INSERT: as schema 12's, content_id allowed as a key; a row with one goes to the function above.
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
    RETURN NEW;
END;
$$;
