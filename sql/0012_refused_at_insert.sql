-- outbox-mailer schema, version 12: header-bound text and attachment entries refused at INSERT.
--
-- What the daemon would refuse anyway when it composes the message, and SQL can tell on its
-- own, is refused by the INSERT, in the application's transaction, with SQLSTATE 23514
-- (check_violation) and a constraint name that says what is wrong (docs/bad-input.md,
-- "Refused at INSERT"):
--
--   email_deliveries_subject_no_control_chars        subject
--   email_deliveries_from_address_no_control_chars   from_address
--   email_deliveries_reply_to_no_control_chars       reply_to
--   email_deliveries_to_addresses_no_control_chars   any element of to_addresses
--   email_deliveries_cc_addresses_no_control_chars   any element of cc_addresses
--   email_deliveries_bcc_addresses_no_control_chars  any element of bcc_addresses
--   email_deliveries_header_names_valid              a headers key that is not 1-76 printable
--                                                    ASCII characters without colon or space
--   email_deliveries_header_values_strings           a headers value that is not a JSON string
--   email_deliveries_header_values_no_control_chars  a headers value with a control character
--   email_deliveries_attachments_entries_object      an attachments entry that is not an object
--   email_deliveries_attachments_entries_keys        an entry without exactly the keys filename,
--                                                    content_type, content_base64
--   email_deliveries_attachments_entries_strings     an entry whose filename, content_type or
--                                                    content_base64 is not a JSON string
--   email_deliveries_attachments_filename_no_control_chars   a filename with a control character
--
-- "Control character" is exactly the daemon's set (outbox_mailer/addresses.py, _FORBIDDEN): C0
-- and C1 controls U+0001-U+001F and U+007F-U+009F (TAB, CR, LF, NEL included), and U+2028 and
-- U+2029, which line-splitting readers take for line breaks. (NUL and lone surrogates cannot be
-- stored in text or jsonb at all.) The daemon refuses each of these rows today, with the same
-- field named; nothing the daemon would send is refused here. Address syntax, IDN, display
-- names, reserved header names, the media type and base64 of attachments, filename length and
-- the 998-octet line limit stay with the daemon (docs/bad-input.md says why).
--
-- Why checks in the content trigger and not CHECK constraints: PostgreSQL evaluates every CHECK
-- on every UPDATE, whichever columns change, so a regular expression on subject and a walk of
-- headers and attachments would run on each claim and outcome write (the hot path), for
-- columns the daemon never writes; schema 8 moved the application columns' checks into the
-- content trigger for that reason (measured then: 21.5 -> 7.7 us of PostgreSQL CPU per claimed
-- row). They run in the same trigger, on INSERT and after an UPDATE of the content, and raise
-- like a CHECK does: SQLSTATE 23514, the constraint name, the column, and a DETAIL naming the
-- element (to_addresses[2], headers.X-Note, attachments[1].filename) and the character.
--
-- Rows already in the table are neither read nor changed: the upgrade is instant on any table
-- and cannot fail on old rows. An old row that breaks these rules behaves as under schema 11:
-- a pending one is failed by the daemon when composed, with the field named; an UPDATE that
-- does not write the offending column (prune's scrub, retry, cancel, resolve) goes through,
-- because on UPDATE a column is judged only when its value changes; an UPDATE that writes it
-- must write it clean.
--
-- The recheck after an UPDATE now also fires on from_address and reply_to (schema 8 left them
-- out of its column list). No index, no new column; the daemon's claim and outcome writes fire
-- nothing new (they write none of these columns).

-- The first character of value the daemon refuses in a header-bound string, or null.
CREATE FUNCTION email_deliveries_control_character(value text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT substring(value FROM '[\x01-\x1f\x7f-\x9f\u2028\u2029]')
$$;

-- Raised like a violated CHECK constraint, with the element and the character in DETAIL.
CREATE FUNCTION email_deliveries_refuse_field(constraint_name text, column_name text, detail text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'new row for relation "email_deliveries" violates check constraint "%"', constraint_name
        USING ERRCODE = 'check_violation', CONSTRAINT = constraint_name, TABLE = 'email_deliveries',
              COLUMN = column_name, DETAIL = detail;
END;
$$;

-- "the control character U+000D at position 3"
CREATE FUNCTION email_deliveries_describe_control(value text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT 'the control character U+' || lpad(upper(to_hex(ascii(c))), 4, '0')
           || ' at position ' || strpos(value, c)
    FROM (SELECT email_deliveries_control_character(value) AS c) AS found
$$;

-- The checks of this version. Each argument is a column's value; a null one is not judged (an
-- UPDATE passes only the columns whose value it changes, so old rows stay updatable). Scalar
-- arguments, not the row: passing a row to a function costs about 10 us per row argument here.
CREATE FUNCTION email_deliveries_refuse_hostile(
    p_subject text, p_from_address text, p_reply_to text, p_to_addresses text[], p_cc_addresses text[],
    p_bcc_addresses text[], p_headers jsonb, p_attachments jsonb) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    field text;
    item text;
    items text[];
    i integer;
    header_name text;
    header_value jsonb;
    entry jsonb;
    key_count bigint;
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
    -- attachments: an array (schema 8's check ran before) of {filename, content_type, content_base64}.
    IF p_attachments <> '[]'::jsonb THEN
        i := 0;
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
            key_count := (SELECT count(*) FROM jsonb_object_keys(entry));
            IF key_count <> 3 THEN
                PERFORM email_deliveries_refuse_field('email_deliveries_attachments_entries_keys', 'attachments',
                    'attachments[' || i || '] has unknown keys: ' || (
                        SELECT string_agg(to_jsonb(k)::text, ', ' ORDER BY k)
                        FROM jsonb_object_keys(entry) AS k
                        WHERE k NOT IN ('filename', 'content_type', 'content_base64')));
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
            i := i + 1;
        END LOOP;
    END IF;
END;
$$;

-- On INSERT: schema 8's checks and the size first (their constraint names are unchanged), then
-- these. A row that passes is found so by at most four expressions (one regular expression
-- over its text, one JSON path over its headers, two over its attachments), without calling
-- the function above, which walks each element to name the one at fault.
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
                                                           && @.key != "content_base64")))')
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

-- After an UPDATE of the content: the same checks, of the columns whose value changed only.
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
    UPDATE email_deliveries SET content_bytes = email_deliveries_checked_size(NEW) WHERE id = NEW.id;
    RETURN NULL;
END;
$$;

DROP TRIGGER email_deliveries_recheck_content ON email_deliveries;
CREATE TRIGGER email_deliveries_recheck_content
    AFTER UPDATE OF dedupe_key, from_address, reply_to, subject, text_body, html_body, to_addresses,
                    cc_addresses, bcc_addresses, headers, attachments, metadata, transport, expires_at,
                    created_at
    ON email_deliveries
    FOR EACH ROW EXECUTE FUNCTION email_deliveries_recheck_content();
