-- The schema of outbox-mailer after every migration in sql/, as pg_dump --schema-only (PostgreSQL 15) writes it.
-- Generated: do not edit; regenerate with `python -m tests.schema_dump --write` after adding a migration.
-- For reading only: never apply this file, with outbox-mailer migrate or any migration tool;
-- the schema is the numbered migrations in sql/.

--
-- PostgreSQL database dump
--

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: email_console_act(bytea, text, text[], text, integer, jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_console_act(session bytea, action text, keys text[], outcome text, default_attempts integer, detail jsonb) RETURNS SETOF text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '$user', 'public'
    AS $$
DECLARE
    actor text := email_console_operator(session);
    done text[];
BEGIN
    IF action = 'retry' THEN
        done := ARRAY(SELECT email_delivery_retry(keys, NULL, default_attempts));
    ELSIF action = 'cancel' THEN
        done := ARRAY(SELECT email_delivery_cancel(keys));
    ELSIF action = 'resolve' AND cardinality(keys) = 1 THEN
        done := ARRAY(SELECT email_delivery_resolve(keys[1], outcome));
    ELSE
        RAISE EXCEPTION 'no such action: %', action USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO email_operator_actions (actor, action, dedupe_key, detail)
    SELECT actor, action, k, coalesce(detail, '{}') FROM unnest(done) AS k;
    RETURN QUERY SELECT unnest(done);
END;
$$;


--
-- Name: email_console_operator(bytea); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_console_operator(session bytea) RETURNS text
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO '$user', 'public'
    AS $$
DECLARE
    actor text;
BEGIN
    SELECT s.user_name INTO actor FROM email_console_sessions s
    WHERE s.token_hash = session AND s.role = 'operator'
      AND (s.by_proxy OR EXISTS (SELECT 1 FROM email_console_users u WHERE u.name = s.user_name AND u.role = s.role));
    IF actor IS NULL THEN
        RAISE EXCEPTION 'not the session of an operator' USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN actor;
END;
$$;


--
-- Name: email_console_password_hash(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_console_password_hash(user_name text) RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO '$user', 'public'
    AS $$
    SELECT password_hash FROM email_console_users WHERE name = user_name;
$$;


--
-- Name: email_console_pause(bytea, text, text, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_console_pause(session bytea, transport text, reason text, paused_until timestamp with time zone) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '$user', 'public'
    AS $$
BEGIN
    PERFORM email_transport_pause(transport, email_console_operator(session), reason, paused_until);
END;
$$;


--
-- Name: email_console_resume(bytea, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_console_resume(session bytea, transport text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '$user', 'public'
    AS $$
BEGIN
    RETURN cardinality(email_transport_resume(transport, email_console_operator(session))) > 0;
END;
$$;


--
-- Name: email_console_suppress(bytea, text, text, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_console_suppress(session bytea, address text, reason text, expires_at timestamp with time zone) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '$user', 'public'
    AS $$
DECLARE
    actor text := email_console_operator(session);
BEGIN
    PERFORM email_suppress(address, reason, 'operator', expires_at);
    INSERT INTO email_operator_actions (actor, action, address, detail)
    VALUES (actor, 'suppress', address, jsonb_build_object('reason', reason, 'expires_at', expires_at));
END;
$$;


--
-- Name: email_console_unsuppress(bytea, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_console_unsuppress(session bytea, address text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '$user', 'public'
    AS $$
DECLARE
    actor text := email_console_operator(session);
BEGIN
    DELETE FROM email_suppressions s WHERE s.address = email_console_unsuppress.address;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO email_operator_actions (actor, action, address) VALUES (actor, 'unsuppress', address);
    RETURN true;
END;
$$;


--
-- Name: email_deliveries_check_content(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_deliveries_check_content() RETURNS trigger
    LANGUAGE plpgsql
    AS $_$
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
$_$;


SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: email_deliveries; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.email_deliveries (
    id bigint NOT NULL,
    dedupe_key text NOT NULL,
    from_address text,
    to_addresses text[] NOT NULL,
    cc_addresses text[] DEFAULT '{}'::text[] NOT NULL,
    bcc_addresses text[] DEFAULT '{}'::text[] NOT NULL,
    reply_to text,
    subject text,
    text_body text,
    html_body text,
    headers jsonb DEFAULT '{}'::jsonb NOT NULL,
    attachments jsonb DEFAULT '[]'::jsonb NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    transport text,
    priority smallint DEFAULT 0 NOT NULL,
    scheduled_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone,
    max_attempts integer,
    attempts integer DEFAULT 0 NOT NULL,
    last_error text,
    provider_message_id text,
    sent_at timestamp with time zone,
    claim_token uuid,
    claimed_at timestamp with time zone,
    claimed_by text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    first_attempt_at timestamp with time zone,
    scrubbed_at timestamp with time zone,
    content_bytes bigint,
    retry_recipients text[],
    refused_recipients text[] DEFAULT '{}'::text[] NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    message_id text,
    delivery_event text,
    delivery_event_at timestamp with time zone,
    ignore_suppressions boolean DEFAULT false NOT NULL,
    traceparent text,
    template text,
    template_data jsonb,
    locale text,
    template_version integer,
    unsubscribe_category text,
    provider_template text
)
WITH (autovacuum_vacuum_scale_factor='0.01', autovacuum_vacuum_threshold='1000', autovacuum_vacuum_insert_scale_factor='0.05', autovacuum_analyze_scale_factor='0.02', autovacuum_vacuum_cost_delay='1', fillfactor='50');


--
-- Name: TABLE email_deliveries; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.email_deliveries IS 'outbox-mailer: one row per email. Applications INSERT (ON CONFLICT (dedupe_key) DO NOTHING) and SELECT; the daemon owns status.';


--
-- Name: COLUMN email_deliveries.first_attempt_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.email_deliveries.first_attempt_at IS 'daemon-owned: when the first attempt was claimed (start of the provider''s idempotency-key window)';


--
-- Name: COLUMN email_deliveries.scrubbed_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.email_deliveries.scrubbed_at IS 'daemon-owned: when prune removed the bodies, attachments and custom headers';


--
-- Name: COLUMN email_deliveries.content_bytes; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.email_deliveries.content_bytes IS 'db-owned (trigger): octets of the row''s content; rows over the daemon''s max_message_bytes fail unread';


--
-- Name: COLUMN email_deliveries.retry_recipients; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.email_deliveries.retry_recipients IS 'daemon-owned: envelope recipients the next attempt sends to (null = all); set after a partial refusal';


--
-- Name: COLUMN email_deliveries.refused_recipients; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.email_deliveries.refused_recipients IS 'daemon-owned: envelope recipients that will not get this email; status sent with {} = every recipient got it';


--
-- Name: COLUMN email_deliveries.message_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.email_deliveries.message_id IS 'The Message-ID header the daemon sends, written by the first claim';


--
-- Name: COLUMN email_deliveries.delivery_event; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.email_deliveries.delivery_event IS 'Latest delivery event reported for the row (delivered, delayed, bounced, complained); null while unknown';


--
-- Name: COLUMN email_deliveries.ignore_suppressions; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.email_deliveries.ignore_suppressions IS 'Application-owned: send even to suppressed addresses';


--
-- Name: COLUMN email_deliveries.traceparent; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.email_deliveries.traceparent IS 'application-owned: W3C traceparent of the span that enqueued the email (null: none); checked at INSERT';


--
-- Name: COLUMN email_deliveries.template; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.email_deliveries.template IS 'app-owned: the name of an email_templates template; then subject and bodies are null (schema 27)';


--
-- Name: COLUMN email_deliveries.locale; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.email_deliveries.locale IS 'app-owned, resolved at INSERT: the locale asked for, replaced by the locale of the version resolved';


--
-- Name: COLUMN email_deliveries.template_version; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.email_deliveries.template_version IS 'resolved at INSERT (or given by the app and checked): the template version every attempt renders';


--
-- Name: COLUMN email_deliveries.unsubscribe_category; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.email_deliveries.unsubscribe_category IS 'application-owned: the unsubscribe category of a single-recipient email (List-Unsubscribe, RFC 8058); null: none';


--
-- Name: COLUMN email_deliveries.provider_template; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.email_deliveries.provider_template IS 'app-owned: the alias or id of a template kept at the provider, rendered there with template_data; then subject, bodies and template are null (schema 29)';


--
-- Name: email_deliveries_check_states(public.email_deliveries); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_deliveries_check_states(d public.email_deliveries) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    -- the former CHECK constraints, by name (the order PostgreSQL evaluated them in); a null result
    -- passes, as it passed a CHECK
    IF (d.attempts >= 0 AND (d.max_attempts IS NULL OR d.max_attempts >= 1)) IS FALSE THEN
        PERFORM email_deliveries_refuse('email_deliveries_attempts_valid');
    END IF;
    IF ((d.status = 'sending') = (d.claim_token IS NOT NULL AND d.claimed_at IS NOT NULL)) IS FALSE THEN
        PERFORM email_deliveries_refuse('email_deliveries_claimed_iff_sending');
    END IF;
    IF (d.delivery_event IN ('delivered', 'delayed', 'bounced', 'complained')) IS FALSE THEN
        PERFORM email_deliveries_refuse('email_deliveries_delivery_event_valid');
    END IF;
    IF (d.scheduled_at >= '1900-01-01 00:00+00' AND d.scheduled_at < '9999-01-01 00:00+00') IS FALSE THEN
        PERFORM email_deliveries_refuse('email_deliveries_scheduled_at_range');
    END IF;
    IF ((d.status = 'sent') = (d.sent_at IS NOT NULL)) IS FALSE THEN
        PERFORM email_deliveries_refuse('email_deliveries_sent_iff_sent_at');
    END IF;
    IF (d.status IN ('pending', 'sending', 'sent', 'failed', 'cancelled', 'in_doubt')) IS FALSE THEN
        PERFORM email_deliveries_refuse('email_deliveries_status_valid');
    END IF;
    IF (d.updated_at >= '1900-01-01 00:00+00' AND d.updated_at < '9999-01-01 00:00+00') IS FALSE THEN
        PERFORM email_deliveries_refuse('email_deliveries_updated_at_range');
    END IF;
END;
$$;


--
-- Name: FUNCTION email_deliveries_check_states(d public.email_deliveries); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.email_deliveries_check_states(d public.email_deliveries) IS 'outbox-mailer: the rules of the columns the daemon writes, checked at INSERT and at other sessions'' UPDATEs (schema 26)';


--
-- Name: email_deliveries_check_traceparent(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_deliveries_check_traceparent(value text) RETURNS void
    LANGUAGE plpgsql
    AS $_$
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
$_$;


--
-- Name: email_deliveries_check_unsubscribe(public.email_deliveries); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_deliveries_check_unsubscribe(d public.email_deliveries) RETURNS void
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: email_deliveries_checked_size(public.email_deliveries); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_deliveries_checked_size(d public.email_deliveries) RETURNS bigint
    LANGUAGE plpgsql
    AS $_$
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
$_$;


--
-- Name: email_deliveries_content_size(text, text, text, text[], text[], text[], jsonb, jsonb, jsonb, jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_deliveries_content_size(subject text, text_body text, html_body text, to_addresses text[], cc_addresses text[], bcc_addresses text[], headers jsonb, attachments jsonb, metadata jsonb, template_data jsonb) RETURNS bigint
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
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


--
-- Name: email_deliveries_control_character(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_deliveries_control_character(value text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
    SELECT substring(value FROM '[\x01-\x1f\x7f-\x9f\u2028\u2029]')
$$;


--
-- Name: email_deliveries_describe_control(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_deliveries_describe_control(value text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
    SELECT 'the control character U+' || lpad(upper(to_hex(ascii(c))), 4, '0')
           || ' at position ' || strpos(value, c)
    FROM (SELECT email_deliveries_control_character(value) AS c) AS found
$$;


--
-- Name: email_deliveries_drop_followers(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_deliveries_drop_followers() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '$user', 'public'
    AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        -- each is empty already when the same TRUNCATE named it too (it may not be truncated twice)
        IF EXISTS (SELECT 1 FROM email_queue) THEN
            TRUNCATE email_queue;
        END IF;
        IF EXISTS (SELECT 1 FROM email_delivery_attempts) THEN
            TRUNCATE email_delivery_attempts;
        END IF;
    ELSE
        DELETE FROM email_queue q USING gone g WHERE q.delivery_id = g.id;
        DELETE FROM email_delivery_attempts a USING gone g WHERE a.delivery_id = g.id;
    END IF;
    RETURN NULL;
END;
$$;


--
-- Name: email_deliveries_queue_inserted(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_deliveries_queue_inserted() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '$user', 'public'
    AS $$
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


--
-- Name: email_deliveries_recheck_content(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_deliveries_recheck_content() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: email_deliveries_recheck_traceparent(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_deliveries_recheck_traceparent() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM email_deliveries_check_traceparent(NEW.traceparent);
    RETURN NULL;
END;
$$;


--
-- Name: email_deliveries_refuse(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_deliveries_refuse(constraint_name text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'new row for relation "email_deliveries" violates check constraint "%"', constraint_name
        USING ERRCODE = 'check_violation', CONSTRAINT = constraint_name, TABLE = 'email_deliveries';
END;
$$;


--
-- Name: email_deliveries_refuse_field(text, text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_deliveries_refuse_field(constraint_name text, column_name text, detail text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'new row for relation "email_deliveries" violates check constraint "%"', constraint_name
        USING ERRCODE = 'check_violation', CONSTRAINT = constraint_name, TABLE = 'email_deliveries',
              COLUMN = column_name, DETAIL = detail;
END;
$$;


--
-- Name: email_deliveries_refuse_hostile(text, text, text, text[], text[], text[], jsonb, jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_deliveries_refuse_hostile(p_subject text, p_from_address text, p_reply_to text, p_to_addresses text[], p_cc_addresses text[], p_bcc_addresses text[], p_headers jsonb, p_attachments jsonb) RETURNS void
    LANGUAGE plpgsql
    AS $_$
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
$_$;


--
-- Name: email_deliveries_sync_queue(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_deliveries_sync_queue() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '$user', 'public'
    AS $$
BEGIN
    PERFORM email_deliveries_check_states(NEW);
    IF OLD.status IS DISTINCT FROM NEW.status OR OLD.scheduled_at IS DISTINCT FROM NEW.scheduled_at
       OR OLD.priority IS DISTINCT FROM NEW.priority OR OLD.transport IS DISTINCT FROM NEW.transport
       OR OLD.dedupe_key IS DISTINCT FROM NEW.dedupe_key THEN
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
    END IF;
    IF NEW.status = 'pending' AND NEW.scheduled_at <= now() THEN
        PERFORM pg_notify('outbox_mailer', '');  -- a row made due now: wake the claimers
    END IF;
    RETURN NULL;
END;
$$;


--
-- Name: email_delivery_cancel(text[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_delivery_cancel(keys text[]) RETURNS SETOF text
    LANGUAGE sql
    AS $$
    -- only pending rows: a row being sent is not cancelled under the sender
    UPDATE email_deliveries SET status = 'cancelled', last_error = 'cancelled by operator', updated_at = now()
    WHERE dedupe_key = ANY (keys) AND status = 'pending'
    RETURNING dedupe_key;
$$;


--
-- Name: email_delivery_resolve(text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_delivery_resolve(key text, outcome text) RETURNS SETOF text
    LANGUAGE sql
    AS $$
    -- an in_doubt row settled as 'sent' or 'failed' by an operator
    UPDATE email_deliveries
    SET status = outcome, sent_at = CASE WHEN outcome = 'sent' THEN now() END,
        last_error = 'resolved as ' || outcome || ' by an operator; was: ' || coalesce(last_error, 'in doubt'),
        updated_at = now()
    WHERE dedupe_key = key AND status = 'in_doubt' AND outcome IN ('sent', 'failed')
    RETURNING dedupe_key;
$$;


--
-- Name: email_delivery_retry(text[], integer, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_delivery_retry(keys text[], extra_attempts integer, default_attempts integer) RETURNS SETOF text
    LANGUAGE sql
    AS $$
    -- back to pending now, with extra_attempts more tries (null: as many as the row's own
    -- max_attempts, default_attempts when that is null); only failed, cancelled or in_doubt rows,
    -- and never one whose content retention removed (it would go out as its subject alone)
    UPDATE email_deliveries d
    SET status = 'pending', scheduled_at = now(),
        max_attempts = d.attempts + coalesce(extra_attempts, d.max_attempts, default_attempts),
        last_error = NULL, updated_at = now()
    WHERE d.dedupe_key = ANY (keys) AND d.status IN ('failed', 'cancelled', 'in_doubt') AND d.scrubbed_at IS NULL
    RETURNING d.dedupe_key;
$$;


--
-- Name: email_recipient_keys(text[], text[], text[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_recipient_keys(to_addresses text[], cc_addresses text[], bcc_addresses text[]) RETURNS text[]
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS $_$
DECLARE
    address text;
    keys text[] := '{}';
BEGIN
    FOREACH address IN ARRAY to_addresses || cc_addresses || bcc_addresses LOOP
        IF strpos(address, '<') > 0 THEN  -- "Name <local@domain>": the part in angle brackets
            address := coalesce(substring(address FROM '<([^<>]*)>\s*$'), address);
        END IF;
        keys := keys || lower(btrim(address));
    END LOOP;
    RETURN keys;
END;
$_$;


--
-- Name: email_unsubscribe_category_valid(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_unsubscribe_category_valid(value text) RETURNS boolean
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $_$
    SELECT value ~ '^[a-z0-9][a-z0-9._-]{0,63}$'
$_$;


--
-- Name: email_suppressions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.email_suppressions (
    address text NOT NULL,
    reason text NOT NULL,
    source text NOT NULL,
    delivery_id bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone,
    address_form smallint DEFAULT 2 NOT NULL,
    scope text DEFAULT ''::text NOT NULL,
    CONSTRAINT email_suppressions_address_normalised CHECK (((address = lower((address COLLATE "C"))) AND (address ~~ '%_@_%'::text) AND (address !~ '[<>[:space:]]'::text))),
    CONSTRAINT email_suppressions_reason_valid CHECK ((reason = ANY (ARRAY['hard_bounce'::text, 'complaint'::text, 'unsubscribe'::text, 'manual'::text]))),
    CONSTRAINT email_suppressions_scope_valid CHECK (((scope = ''::text) OR public.email_unsubscribe_category_valid(scope)))
);


--
-- Name: COLUMN email_suppressions.address_form; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.email_suppressions.address_form IS '2: address in the envelope''s form (outbox_mailer/addresses.py); 1: written before schema 20, rewritten by migrate or the daemon''s start';


--
-- Name: COLUMN email_suppressions.scope; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.email_suppressions.scope IS 'empty: all mail to the address; else the unsubscribe category whose rows alone it suppresses';


--
-- Name: email_suppress(text, text, text, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_suppress(address text, reason text, source text, expires_at timestamp with time zone) RETURNS SETOF public.email_suppressions
    LANGUAGE sql
    AS $_$
    SELECT * FROM email_suppress($1, $2, $3, $4, '');
$_$;


--
-- Name: email_suppress(text, text, text, timestamp with time zone, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_suppress(address text, reason text, source text, expires_at timestamp with time zone, scope text) RETURNS SETOF public.email_suppressions
    LANGUAGE sql
    AS $_$
    INSERT INTO email_suppressions (address, reason, source, expires_at, scope) VALUES ($1, $2, $3, $4, $5)
    ON CONFLICT (address, scope) DO UPDATE
        SET reason = EXCLUDED.reason, source = EXCLUDED.source, expires_at = EXCLUDED.expires_at,
            created_at = now(), delivery_id = NULL
    RETURNING *;
$_$;


--
-- Name: email_take_capacity(text, double precision, integer, integer, double precision, bigint, double precision, bigint, bigint, timestamp with time zone, double precision); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_take_capacity(p_transport text, p_rate double precision, p_burst integer, p_requests integer, p_horizon double precision, p_daily_limit bigint, p_window double precision, p_recipients bigint, p_returned bigint, p_returned_slot timestamp with time zone, p_recovery double precision) RETURNS TABLE(requests integer, first_in double precision, spacing double precision, tolerance double precision, recipients bigint, slot timestamp with time zone, slot_left double precision, used bigint, free_in double precision, rate double precision, throttles bigint)
    LANGUAGE plpgsql
    AS $$
DECLARE
    lim email_transport_limits;
    t timestamptz;
    start timestamptz;
    width double precision := p_window / 100;
BEGIN
    INSERT INTO email_transport_limits AS l (transport) VALUES (p_transport) ON CONFLICT DO NOTHING;
    SELECT * INTO lim FROM email_transport_limits AS l WHERE l.transport = p_transport FOR UPDATE;
    t := clock_timestamp();
    requests := 0; first_in := 0; spacing := 0; tolerance := 0; recipients := 0; used := 0;
    throttles := lim.throttles;
    slot := to_timestamp(floor(extract(epoch FROM t) / width) * width);
    slot_left := extract(epoch FROM slot - t) + width;
    IF p_returned > 0 AND p_returned_slot IS NOT NULL THEN
        UPDATE email_transport_usage AS u SET recipients = greatest(0, u.recipients - p_returned)
         WHERE u.transport = p_transport AND u.slot_start = p_returned_slot;
    END IF;
    IF p_daily_limit IS NOT NULL THEN
        SELECT coalesce(sum(u.recipients), 0) INTO used FROM email_transport_usage AS u
         WHERE u.transport = p_transport
           AND u.slot_start > t - make_interval(secs => p_window + u.slot_seconds);
        recipients := least(p_recipients, greatest(0, p_daily_limit - used));
        used := used + recipients;
        IF recipients < p_recipients THEN
            SELECT extract(epoch FROM min(u.slot_start + make_interval(secs => p_window + u.slot_seconds)) - t)
              INTO free_in FROM email_transport_usage AS u
             WHERE u.transport = p_transport AND u.recipients > 0
               AND u.slot_start > t - make_interval(secs => p_window + u.slot_seconds);
        END IF;
    END IF;
    IF p_rate IS NOT NULL THEN
        rate := p_rate * least(1, lim.rate_share + greatest(0, extract(epoch FROM t - lim.share_at)) / p_recovery);
        spacing := 1 / rate;
        tolerance := (p_burst - 1) / p_rate;  -- at the configured rate: a lowered one never brings slots forward
        start := greatest(lim.next_at, t);
        first_in := extract(epoch FROM start - t) - tolerance;
        first_in := greatest(first_in, coalesce(extract(epoch FROM lim.held_until - t), first_in));
        IF p_requests > 0 AND recipients = p_recipients THEN
            requests := least(p_requests, greatest(0, floor((p_horizon - first_in) / spacing) + 1))::integer;
        END IF;
        IF requests > 0 THEN
            UPDATE email_transport_limits AS l SET next_at = start + make_interval(secs => requests * spacing)
             WHERE l.transport = p_transport;
        END IF;
    ELSIF p_requests > 0 AND recipients = p_recipients THEN
        requests := p_requests;
    END IF;
    IF requests > 0 OR recipients > 0 THEN
        INSERT INTO email_transport_usage AS u (transport, slot_start, slot_seconds, requests, recipients)
        VALUES (p_transport, slot, width, requests, recipients)
        ON CONFLICT (transport, slot_start)
        DO UPDATE SET requests = u.requests + excluded.requests, recipients = u.recipients + excluded.recipients;
        DELETE FROM email_transport_usage AS u
         WHERE u.transport = p_transport AND u.slot_start < t - make_interval(secs => p_window)
           AND u.slot_start <= t - make_interval(secs => p_window + u.slot_seconds);
    END IF;
    RETURN NEXT;
END $$;


--
-- Name: email_templates_immutable(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_templates_immutable() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'email_templates: template %, locale %, version % is immutable (add a new version instead)',
        OLD.name, OLD.locale, OLD.version
        USING ERRCODE = 'check_violation', CONSTRAINT = 'email_templates_immutable', TABLE = 'email_templates';
END;
$$;


--
-- Name: email_templates_resolve(text, text, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_templates_resolve(p_name text, p_locale text, p_version integer, OUT locale text, OUT version integer) RETURNS record
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO '$user', 'public'
    AS $$
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


--
-- Name: email_throttle_transport(text, double precision, double precision, double precision, double precision, double precision); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_throttle_transport(p_transport text, p_factor double precision, p_min_share double precision, p_hold double precision, p_recovery double precision, p_cooldown double precision) RETURNS TABLE(rate_share double precision, lowered boolean)
    LANGUAGE plpgsql
    AS $$
DECLARE
    lim email_transport_limits;
    t timestamptz;
BEGIN
    INSERT INTO email_transport_limits AS l (transport) VALUES (p_transport) ON CONFLICT DO NOTHING;
    SELECT * INTO lim FROM email_transport_limits AS l WHERE l.transport = p_transport FOR UPDATE;
    t := clock_timestamp();
    rate_share := least(1, lim.rate_share + greatest(0, extract(epoch FROM t - lim.share_at)) / p_recovery);
    lowered := lim.throttled_at IS NULL OR lim.throttled_at <= t - make_interval(secs => p_cooldown);
    IF lowered THEN
        rate_share := greatest(p_min_share, rate_share * p_factor);
    END IF;
    UPDATE email_transport_limits AS l
       SET rate_share = email_throttle_transport.rate_share, share_at = t,
           throttles = l.throttles + lowered::integer,
           throttled_at = CASE WHEN lowered THEN t ELSE l.throttled_at END,
           next_at = greatest(l.next_at, t + make_interval(secs => greatest(p_hold, 0))),
           held_until = greatest(l.held_until, t + make_interval(secs => greatest(p_hold, 0)))
     WHERE l.transport = p_transport;
    RETURN NEXT;
END $$;


--
-- Name: email_transport_pauses; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.email_transport_pauses (
    transport text NOT NULL,
    source text NOT NULL,
    paused_by text NOT NULL,
    reason text DEFAULT ''::text NOT NULL,
    paused_at timestamp with time zone DEFAULT now() NOT NULL,
    paused_until timestamp with time zone,
    CONSTRAINT email_transport_pauses_breaker_ends CHECK (((source = 'operator'::text) OR (paused_until IS NOT NULL))),
    CONSTRAINT email_transport_pauses_source_valid CHECK ((source = ANY (ARRAY['operator'::text, 'breaker'::text]))),
    CONSTRAINT email_transport_pauses_text_valid CHECK ((((char_length(transport) >= 1) AND (char_length(transport) <= 255)) AND (char_length(reason) <= 1000)))
);


--
-- Name: email_transport_pause(text, text, text, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_transport_pause(transport text, actor text, reason text, paused_until timestamp with time zone) RETURNS SETOF public.email_transport_pauses
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO email_operator_actions (actor, action, transport, detail)
    VALUES (actor, 'pause', transport, jsonb_build_object('reason', reason, 'until', paused_until));
    RETURN QUERY
    INSERT INTO email_transport_pauses AS p (transport, source, paused_by, reason, paused_until)
    VALUES (transport, 'operator', actor, reason, paused_until)
    ON CONFLICT ON CONSTRAINT email_transport_pauses_pkey DO UPDATE
        SET paused_by = EXCLUDED.paused_by, reason = EXCLUDED.reason, paused_at = now(),
            paused_until = EXCLUDED.paused_until
    RETURNING p.*;
END;
$$;


--
-- Name: email_transport_resume(text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.email_transport_resume(transport text, actor text) RETURNS text[]
    LANGUAGE plpgsql
    AS $$
    -- the sources of the pauses lifted (operator, breaker); none: nothing was paused, nothing recorded
DECLARE
    lifted text[];
BEGIN
    WITH gone AS (DELETE FROM email_transport_pauses p WHERE p.transport = email_transport_resume.transport
                  AND (p.paused_until IS NULL OR p.paused_until > now()) RETURNING p.source)
    SELECT coalesce(array_agg(source ORDER BY source DESC), '{}') INTO lifted FROM gone;
    DELETE FROM email_transport_pauses p WHERE p.transport = email_transport_resume.transport;  -- ended ones
    IF cardinality(lifted) > 0 THEN
        INSERT INTO email_operator_actions (actor, action, transport, detail)
        VALUES (actor, 'resume', transport, jsonb_build_object('lifted', lifted));
    END IF;
    RETURN lifted;
END;
$$;


--
-- Name: outbox_mailer_lock_key(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.outbox_mailer_lock_key(dedupe_key text) RETURNS bigint
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN hashtextextended(('outbox-mailer:'::text || dedupe_key), (0)::bigint);


--
-- Name: FUNCTION outbox_mailer_lock_key(dedupe_key text); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.outbox_mailer_lock_key(dedupe_key text) IS 'outbox-mailer: the session advisory-lock key a daemon holds while it sends the row with this dedupe key';


--
-- Name: outbox_mailer_suppression_address(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.outbox_mailer_suppression_address(address text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $_$
    SELECT lower(normalize(btrim(coalesce(substring(address FROM '<([^<>]*)>\s*$'), address)), NFC) COLLATE "C")
$_$;


--
-- Name: email_batches; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.email_batches (
    id bigint NOT NULL,
    transport text NOT NULL,
    idempotency_key text NOT NULL,
    member_ids bigint[] NOT NULL,
    sends integer DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    recipients jsonb,
    request_digest text,
    CONSTRAINT email_batches_members CHECK ((cardinality(member_ids) >= 1))
);


--
-- Name: TABLE email_batches; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.email_batches IS 'outbox-mailer (daemon-owned): provider batch requests, recorded before they are made; not an API.';


--
-- Name: COLUMN email_batches.recipients; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.email_batches.recipients IS 'outbox-mailer: each member''s To, Cc and Bcc as the batch request carried them (suppressed addresses left out)';


--
-- Name: COLUMN email_batches.request_digest; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.email_batches.request_digest IS 'outbox-mailer: SHA-256 of the batch request, checked before a rescuer resends it under the same key';


--
-- Name: email_batches_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.email_batches ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.email_batches_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: email_console_sessions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.email_console_sessions (
    token_hash bytea NOT NULL,
    user_name text NOT NULL,
    role text NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    seen_at timestamp with time zone DEFAULT now() NOT NULL,
    by_proxy boolean DEFAULT false NOT NULL,
    CONSTRAINT email_console_sessions_hash_valid CHECK ((octet_length(token_hash) = 32)),
    CONSTRAINT email_console_sessions_role_valid CHECK ((role = ANY (ARRAY['viewer'::text, 'operator'::text])))
);


--
-- Name: email_console_users; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.email_console_users (
    name text NOT NULL,
    role text NOT NULL,
    password_hash text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT email_console_users_hash_valid CHECK ((password_hash ~~ '$argon2%'::text)),
    CONSTRAINT email_console_users_name_valid CHECK ((((char_length(name) >= 1) AND (char_length(name) <= 64)) AND (name !~ '[[:cntrl:][:space:]]'::text))),
    CONSTRAINT email_console_users_role_valid CHECK ((role = ANY (ARRAY['viewer'::text, 'operator'::text])))
);


--
-- Name: email_daemon_processes; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.email_daemon_processes (
    boot_id uuid NOT NULL,
    pid_ns text NOT NULL,
    pid integer NOT NULL,
    start_ticks bigint NOT NULL,
    worker text NOT NULL,
    seen_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: email_deliveries_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.email_deliveries ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.email_deliveries_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: email_delivery_attempts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.email_delivery_attempts (
    id bigint NOT NULL,
    delivery_id bigint NOT NULL,
    attempt integer NOT NULL,
    started_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone NOT NULL,
    outcome text NOT NULL,
    reply_code smallint,
    enhanced_code text,
    error text,
    transport text NOT NULL,
    worker text NOT NULL,
    refused jsonb,
    message_id text,
    provider_message_id text,
    reply text,
    CONSTRAINT email_delivery_attempts_outcome_valid CHECK ((outcome = ANY (ARRAY['sent'::text, 'transient'::text, 'permanent'::text, 'ambiguous'::text]))),
    CONSTRAINT email_delivery_attempts_time_order CHECK ((finished_at >= started_at))
);


--
-- Name: COLUMN email_delivery_attempts.id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.email_delivery_attempts.id IS 'outbox-mailer: an identity, unique by construction; the primary key is (delivery_id, attempt, started_at) since schema 16';


--
-- Name: COLUMN email_delivery_attempts.refused; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.email_delivery_attempts.refused IS 'every recipient this attempt did not reach: [{"address", "reply_code", "message", "unknown"}]';


--
-- Name: COLUMN email_delivery_attempts.reply; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.email_delivery_attempts.reply IS 'the server''s final reply, one line (SMTP: the answer to the message body); null: none';


--
-- Name: email_delivery_attempts_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.email_delivery_attempts ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.email_delivery_attempts_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: email_delivery_events; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.email_delivery_events (
    id bigint NOT NULL,
    delivery_id bigint,
    provider text NOT NULL,
    provider_event_id text NOT NULL,
    kind text NOT NULL,
    bounce_class text,
    recipient text,
    occurred_at timestamp with time zone,
    received_at timestamp with time zone DEFAULT now() NOT NULL,
    detail jsonb DEFAULT '{}'::jsonb NOT NULL,
    quoted_provider_message_id text,
    quoted_message_id text,
    CONSTRAINT email_delivery_events_bounce_class_valid CHECK ((((bounce_class = ANY (ARRAY['hard'::text, 'soft'::text, 'undetermined'::text])) AND (kind = 'bounced'::text)) OR (bounce_class IS NULL))),
    CONSTRAINT email_delivery_events_kind_valid CHECK ((kind = ANY (ARRAY['delivered'::text, 'delayed'::text, 'bounced'::text, 'complained'::text, 'rejected'::text, 'unsubscribed'::text])))
);


--
-- Name: COLUMN email_delivery_events.quoted_message_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.email_delivery_events.quoted_message_id IS 'The Message-ID an event quoted; kept so that an event that came before its row''s outcome is matched when the outcome is written';


--
-- Name: email_delivery_events_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.email_delivery_events ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.email_delivery_events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: email_operator_actions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.email_operator_actions (
    id bigint NOT NULL,
    actor text NOT NULL,
    action text NOT NULL,
    dedupe_key text,
    address text,
    at timestamp with time zone DEFAULT now() NOT NULL,
    detail jsonb DEFAULT '{}'::jsonb NOT NULL,
    transport text,
    CONSTRAINT email_operator_actions_action_valid CHECK ((action = ANY (ARRAY['retry'::text, 'cancel'::text, 'resolve'::text, 'suppress'::text, 'unsuppress'::text, 'pause'::text, 'resume'::text]))),
    CONSTRAINT email_operator_actions_names_one CHECK ((num_nonnulls(dedupe_key, address, transport) = 1))
);


--
-- Name: email_operator_actions_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.email_operator_actions ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.email_operator_actions_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: email_queue; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.email_queue (
    delivery_id bigint NOT NULL,
    priority smallint NOT NULL,
    scheduled_at timestamp with time zone NOT NULL,
    transport text,
    claimed_at timestamp with time zone,
    batch_id bigint,
    carrier text,
    carrier_claim_token uuid
)
WITH (fillfactor='70', autovacuum_vacuum_scale_factor='0.01', autovacuum_vacuum_threshold='1000', autovacuum_vacuum_insert_scale_factor='0.05', autovacuum_analyze_scale_factor='0.02', autovacuum_vacuum_cost_delay='1');


--
-- Name: TABLE email_queue; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.email_queue IS 'outbox-mailer (daemon-owned): the pending and sending rows of email_deliveries, slim, for claiming and rescue. Not an API: read email_deliveries.';


--
-- Name: COLUMN email_queue.carrier; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.email_queue.carrier IS 'outbox-mailer (daemon-owned): the transport a claim was sent through when not the row''s own, written before the send; valid for the claim carrier_claim_token only.';


--
-- Name: email_templates; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.email_templates (
    id bigint NOT NULL,
    name text NOT NULL,
    locale text NOT NULL,
    version integer NOT NULL,
    subject text NOT NULL,
    text_body text,
    html_body text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    created_by text NOT NULL,
    CONSTRAINT email_templates_has_body CHECK (((text_body IS NOT NULL) OR (html_body IS NOT NULL))),
    CONSTRAINT email_templates_locale_valid CHECK ((locale ~ '^[A-Za-z]{2,8}(-[A-Za-z0-9]{1,8})*$'::text)),
    CONSTRAINT email_templates_name_valid CHECK ((((char_length(name) >= 1) AND (char_length(name) <= 255)) AND (name !~ '[[:cntrl:]]'::text))),
    CONSTRAINT email_templates_version_positive CHECK ((version >= 1))
);


--
-- Name: TABLE email_templates; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.email_templates IS 'outbox-mailer: immutable template versions by (name, locale, version); rows of email_deliveries name them (schema 27)';


--
-- Name: email_templates_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.email_templates ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.email_templates_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: email_transport_limits; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.email_transport_limits (
    transport text NOT NULL,
    next_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    rate_share double precision DEFAULT 1 NOT NULL,
    share_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    throttles bigint DEFAULT 0 NOT NULL,
    throttled_at timestamp with time zone,
    held_until timestamp with time zone,
    CONSTRAINT email_transport_limits_rate_share_check CHECK (((rate_share > (0)::double precision) AND (rate_share <= (1)::double precision)))
);


--
-- Name: email_transport_usage; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.email_transport_usage (
    transport text NOT NULL,
    slot_start timestamp with time zone NOT NULL,
    slot_seconds double precision NOT NULL,
    requests bigint DEFAULT 0 NOT NULL,
    recipients bigint DEFAULT 0 NOT NULL,
    CONSTRAINT email_transport_usage_slot_seconds_check CHECK ((slot_seconds > (0)::double precision))
);


--
-- Name: email_webhook_tokens; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.email_webhook_tokens (
    provider text NOT NULL,
    token text NOT NULL,
    body_sha256 bytea NOT NULL,
    seen_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: outbox_mailer_migrations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.outbox_mailer_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: email_batches email_batches_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.email_batches
    ADD CONSTRAINT email_batches_pkey PRIMARY KEY (id);


--
-- Name: email_console_sessions email_console_sessions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.email_console_sessions
    ADD CONSTRAINT email_console_sessions_pkey PRIMARY KEY (token_hash);


--
-- Name: email_console_users email_console_users_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.email_console_users
    ADD CONSTRAINT email_console_users_pkey PRIMARY KEY (name);


--
-- Name: email_daemon_processes email_daemon_processes_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.email_daemon_processes
    ADD CONSTRAINT email_daemon_processes_pkey PRIMARY KEY (boot_id, pid_ns, pid, start_ticks);


--
-- Name: email_deliveries email_deliveries_dedupe_key_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.email_deliveries
    ADD CONSTRAINT email_deliveries_dedupe_key_key UNIQUE (dedupe_key);


--
-- Name: email_deliveries email_deliveries_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.email_deliveries
    ADD CONSTRAINT email_deliveries_pkey PRIMARY KEY (id);


--
-- Name: email_delivery_attempts email_delivery_attempts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.email_delivery_attempts
    ADD CONSTRAINT email_delivery_attempts_pkey PRIMARY KEY (delivery_id, attempt, started_at);


--
-- Name: email_delivery_events email_delivery_events_once; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.email_delivery_events
    ADD CONSTRAINT email_delivery_events_once UNIQUE (provider, provider_event_id);


--
-- Name: email_delivery_events email_delivery_events_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.email_delivery_events
    ADD CONSTRAINT email_delivery_events_pkey PRIMARY KEY (id);


--
-- Name: email_operator_actions email_operator_actions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.email_operator_actions
    ADD CONSTRAINT email_operator_actions_pkey PRIMARY KEY (id);


--
-- Name: email_queue email_queue_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.email_queue
    ADD CONSTRAINT email_queue_pkey PRIMARY KEY (delivery_id);


--
-- Name: email_suppressions email_suppressions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.email_suppressions
    ADD CONSTRAINT email_suppressions_pkey PRIMARY KEY (address, scope);


--
-- Name: email_templates email_templates_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.email_templates
    ADD CONSTRAINT email_templates_pkey PRIMARY KEY (id);


--
-- Name: email_templates email_templates_version_unique; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.email_templates
    ADD CONSTRAINT email_templates_version_unique UNIQUE (name, locale, version);


--
-- Name: email_transport_limits email_transport_limits_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.email_transport_limits
    ADD CONSTRAINT email_transport_limits_pkey PRIMARY KEY (transport);


--
-- Name: email_transport_pauses email_transport_pauses_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.email_transport_pauses
    ADD CONSTRAINT email_transport_pauses_pkey PRIMARY KEY (transport, source);


--
-- Name: email_transport_usage email_transport_usage_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.email_transport_usage
    ADD CONSTRAINT email_transport_usage_pkey PRIMARY KEY (transport, slot_start);


--
-- Name: email_webhook_tokens email_webhook_tokens_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.email_webhook_tokens
    ADD CONSTRAINT email_webhook_tokens_pkey PRIMARY KEY (provider, token);


--
-- Name: outbox_mailer_migrations outbox_mailer_migrations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.outbox_mailer_migrations
    ADD CONSTRAINT outbox_mailer_migrations_pkey PRIMARY KEY (version);


--
-- Name: email_console_sessions_seen_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX email_console_sessions_seen_idx ON public.email_console_sessions USING btree (seen_at);


--
-- Name: email_console_sessions_user_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX email_console_sessions_user_idx ON public.email_console_sessions USING btree (user_name);


--
-- Name: email_daemon_processes_worker; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX email_daemon_processes_worker ON public.email_daemon_processes USING btree (worker);


--
-- Name: email_deliveries_created_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX email_deliveries_created_idx ON public.email_deliveries USING btree (created_at);


--
-- Name: email_deliveries_recipients_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX email_deliveries_recipients_idx ON public.email_deliveries USING gin (public.email_recipient_keys(to_addresses, cc_addresses, bcc_addresses));


--
-- Name: email_deliveries_unscrubbed_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX email_deliveries_unscrubbed_idx ON public.email_deliveries USING btree (created_at) WHERE (scrubbed_at IS NULL);


--
-- Name: email_delivery_attempts_message_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX email_delivery_attempts_message_idx ON public.email_delivery_attempts USING btree (message_id) WHERE (message_id IS NOT NULL);


--
-- Name: email_delivery_attempts_provider_message_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX email_delivery_attempts_provider_message_idx ON public.email_delivery_attempts USING btree (provider_message_id) WHERE (provider_message_id IS NOT NULL);


--
-- Name: email_delivery_events_delivery_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX email_delivery_events_delivery_idx ON public.email_delivery_events USING btree (delivery_id, occurred_at);


--
-- Name: email_delivery_events_received_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX email_delivery_events_received_idx ON public.email_delivery_events USING btree (received_at);


--
-- Name: email_delivery_events_waiting_message_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX email_delivery_events_waiting_message_idx ON public.email_delivery_events USING btree (quoted_message_id) WHERE ((delivery_id IS NULL) AND (quoted_message_id IS NOT NULL));


--
-- Name: email_delivery_events_waiting_provider_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX email_delivery_events_waiting_provider_idx ON public.email_delivery_events USING btree (quoted_provider_message_id) WHERE ((delivery_id IS NULL) AND (quoted_provider_message_id IS NOT NULL));


--
-- Name: email_operator_actions_at_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX email_operator_actions_at_idx ON public.email_operator_actions USING btree (at);


--
-- Name: email_operator_actions_key_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX email_operator_actions_key_idx ON public.email_operator_actions USING btree (dedupe_key, at) WHERE (dedupe_key IS NOT NULL);


--
-- Name: email_operator_actions_transport_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX email_operator_actions_transport_idx ON public.email_operator_actions USING btree (transport, at) WHERE (transport IS NOT NULL);


--
-- Name: email_queue_batch_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX email_queue_batch_idx ON public.email_queue USING btree (batch_id) WHERE (batch_id IS NOT NULL);


--
-- Name: email_queue_claimed_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX email_queue_claimed_idx ON public.email_queue USING btree (claimed_at) WHERE (claimed_at IS NOT NULL);


--
-- Name: email_queue_due_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX email_queue_due_idx ON public.email_queue USING btree (priority DESC, scheduled_at, delivery_id) WHERE (claimed_at IS NULL);


--
-- Name: email_suppressions_delivery_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX email_suppressions_delivery_idx ON public.email_suppressions USING btree (delivery_id) WHERE (delivery_id IS NOT NULL);


--
-- Name: email_suppressions_old_form_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX email_suppressions_old_form_idx ON public.email_suppressions USING btree (address) WHERE (address_form < 2);


--
-- Name: email_webhook_tokens_seen_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX email_webhook_tokens_seen_idx ON public.email_webhook_tokens USING btree (seen_at);


--
-- Name: email_deliveries email_deliveries_check_content; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER email_deliveries_check_content BEFORE INSERT ON public.email_deliveries FOR EACH ROW EXECUTE FUNCTION public.email_deliveries_check_content();


--
-- Name: email_deliveries email_deliveries_drop_followers; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER email_deliveries_drop_followers AFTER DELETE ON public.email_deliveries REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION public.email_deliveries_drop_followers();


--
-- Name: email_deliveries email_deliveries_notify_insert; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER email_deliveries_notify_insert AFTER INSERT ON public.email_deliveries FOR EACH ROW EXECUTE FUNCTION public.email_deliveries_queue_inserted();


--
-- Name: email_deliveries email_deliveries_recheck_content; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER email_deliveries_recheck_content AFTER UPDATE OF dedupe_key, from_address, reply_to, subject, text_body, html_body, to_addresses, cc_addresses, bcc_addresses, headers, attachments, metadata, transport, expires_at, created_at, template, template_data, locale, template_version, provider_template ON public.email_deliveries FOR EACH ROW EXECUTE FUNCTION public.email_deliveries_recheck_content();


--
-- Name: email_deliveries email_deliveries_recheck_traceparent; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER email_deliveries_recheck_traceparent AFTER UPDATE OF traceparent ON public.email_deliveries FOR EACH ROW WHEN (((new.traceparent IS DISTINCT FROM old.traceparent) AND (new.traceparent IS NOT NULL))) EXECUTE FUNCTION public.email_deliveries_recheck_traceparent();


--
-- Name: email_deliveries email_deliveries_sync_queue; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER email_deliveries_sync_queue AFTER UPDATE OF status, scheduled_at, priority, transport, dedupe_key, sent_at, claim_token, claimed_at, attempts, max_attempts, delivery_event, updated_at ON public.email_deliveries FOR EACH ROW WHEN ((current_setting('outbox_mailer.keeps_queue'::text, true) IS DISTINCT FROM 'on'::text)) EXECUTE FUNCTION public.email_deliveries_sync_queue();


--
-- Name: email_deliveries email_deliveries_truncate_followers; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER email_deliveries_truncate_followers AFTER TRUNCATE ON public.email_deliveries FOR EACH STATEMENT EXECUTE FUNCTION public.email_deliveries_drop_followers();


--
-- Name: email_templates email_templates_immutable; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER email_templates_immutable BEFORE DELETE OR UPDATE ON public.email_templates FOR EACH ROW EXECUTE FUNCTION public.email_templates_immutable();


--
-- Name: email_templates email_templates_no_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER email_templates_no_truncate BEFORE TRUNCATE ON public.email_templates FOR EACH STATEMENT EXECUTE FUNCTION public.email_templates_immutable();


--
-- Name: email_delivery_events email_delivery_events_delivery_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.email_delivery_events
    ADD CONSTRAINT email_delivery_events_delivery_id_fkey FOREIGN KEY (delivery_id) REFERENCES public.email_deliveries(id) ON DELETE CASCADE;


--
-- Name: email_suppressions email_suppressions_delivery_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.email_suppressions
    ADD CONSTRAINT email_suppressions_delivery_id_fkey FOREIGN KEY (delivery_id) REFERENCES public.email_deliveries(id) ON DELETE SET NULL;


--
-- PostgreSQL database dump complete
--
