-- outbox-mailer schema, version 24: transports paused by an operator, and the pauses of the daemons'
-- circuit breakers, in one table that every daemon and the console read.
--
-- email_transport_pauses: at most one operator pause and one breaker pause per transport.
-- * source 'operator': `outbox-mailer pause TRANSPORT [--for DURATION] [--reason TEXT]` or the console's
--   Pause form; paused_until null: until resumed. Every daemon on the database reads these rows about
--   once a second (the `transport_pauses` query) and claims no row for a paused transport (its rows go
--   through an open fallback when it has one).
-- * source 'breaker': written by a daemon when its circuit breaker opens (paused_by 'breaker:<worker>',
--   paused_until the end of that pause; a longer pause of another daemon's breaker replaces it). Each
--   daemon's breaker judges its own reach of the server; the row is there to be seen.
-- `outbox-mailer resume TRANSPORT` (or the console's Resume) removes both and is recorded as the action
-- 'resume'; a daemon whose breaker pause began before that resume closes its breaker.
--
-- email_operator_actions gains the transport an action names (pause, resume).
--
-- Not touched by the hot path: no index of email_deliveries changes here.

CREATE TABLE email_transport_pauses (
    transport    text        NOT NULL,
    source       text        NOT NULL,
    paused_by    text        NOT NULL,
    reason       text        NOT NULL DEFAULT '',
    paused_at    timestamptz NOT NULL DEFAULT now(),
    paused_until timestamptz,
    PRIMARY KEY (transport, source),
    CONSTRAINT email_transport_pauses_source_valid CHECK (source IN ('operator', 'breaker')),
    CONSTRAINT email_transport_pauses_breaker_ends CHECK (source = 'operator' OR paused_until IS NOT NULL),
    CONSTRAINT email_transport_pauses_text_valid
        CHECK (char_length(transport) BETWEEN 1 AND 255 AND char_length(reason) <= 1000)
);

ALTER TABLE email_operator_actions ADD COLUMN transport text;
ALTER TABLE email_operator_actions
    DROP CONSTRAINT email_operator_actions_action_valid,
    ADD CONSTRAINT email_operator_actions_action_valid
        CHECK (action IN ('retry', 'cancel', 'resolve', 'suppress', 'unsuppress', 'pause', 'resume')),
    DROP CONSTRAINT email_operator_actions_names_one,
    ADD CONSTRAINT email_operator_actions_names_one CHECK (num_nonnulls(dedupe_key, address, transport) = 1);
-- A daemon asks for the latest resume of each of its transports.
CREATE INDEX email_operator_actions_transport_idx ON email_operator_actions (transport, at)
    WHERE transport IS NOT NULL;

-- The rules of pause and resume, one home for the CLI (invoker's rights: the daemon's role) and the
-- console (through the functions below). A pause replaces the transport's operator pause.

CREATE FUNCTION email_transport_pause(transport text, actor text, reason text, paused_until timestamptz)
RETURNS SETOF email_transport_pauses LANGUAGE plpgsql AS $$
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

CREATE FUNCTION email_transport_resume(transport text, actor text) RETURNS text[]
LANGUAGE plpgsql AS $$
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

REVOKE EXECUTE ON FUNCTION email_transport_pause(text, text, text, timestamptz), email_transport_resume(text, text)
    FROM PUBLIC;

-- The console's doors (SECURITY DEFINER, the actor from an operator's session row: schema 22).

CREATE FUNCTION email_console_pause(session bytea, transport text, reason text, paused_until timestamptz)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM email_transport_pause(transport, email_console_operator(session), reason, paused_until);
END;
$$;

CREATE FUNCTION email_console_resume(session bytea, transport text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    RETURN cardinality(email_transport_resume(transport, email_console_operator(session))) > 0;
END;
$$;

REVOKE EXECUTE ON FUNCTION email_console_pause(bytea, text, text, timestamptz), email_console_resume(bytea, text)
    FROM PUBLIC;
