-- outbox-mailer schema, version 22: the operator console's sessions in the database, and its
-- actions through functions that take the actor from the session.
--
-- A signed-in console session is a row here, so that it survives a restart of the console and is
-- shared by every console process on the database. The cookie holds a random token; the row holds
-- only its SHA-256 (token_hash): reading this table signs nobody in. The user's role at sign-in is
-- kept, and a session whose user is gone or has another role ends at its next request.
-- Sessions end by `POST /logout`, after OUTBOX_MAILER_CONSOLE__SESSION_SECONDS from started_at, after
-- __IDLE_SECONDS without a request from seen_at (the live refresh does not count), and when their
-- user is removed. Anonymous visitors (the sign-in page) have no row: their form's token is signed,
-- not stored.
--
-- Not touched by the hot path: no index of email_deliveries changes here.

CREATE TABLE email_console_sessions (
    token_hash bytea       PRIMARY KEY,
    user_name  text        NOT NULL,
    role       text        NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    seen_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT email_console_sessions_hash_valid CHECK (octet_length(token_hash) = 32),
    CONSTRAINT email_console_sessions_role_valid CHECK (role IN ('viewer', 'operator'))
);

-- Removing a user ends its sessions; sign-in forgets the expired ones.
CREATE INDEX email_console_sessions_user_idx ON email_console_sessions (user_name);
CREATE INDEX email_console_sessions_seen_idx ON email_console_sessions (seen_at);

-- A session a trusted proxy named (no password, no cookie): made by the console for the one
-- transaction of an action, so that the action's actor comes from a session row like any other.
ALTER TABLE email_console_sessions ADD COLUMN by_proxy boolean NOT NULL DEFAULT false;

-- ---------------------------------------------------------------- operator actions
--
-- The operator actions' rules, one home for the CLI and the console: which statuses each action
-- takes a row from, and what it writes. Invoker's rights: the CLI (the daemon's role) runs them
-- with its own privileges.

CREATE FUNCTION email_delivery_retry(keys text[], extra_attempts integer, default_attempts integer)
RETURNS SETOF text LANGUAGE sql AS $$
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

CREATE FUNCTION email_delivery_cancel(keys text[]) RETURNS SETOF text LANGUAGE sql AS $$
    -- only pending rows: a row being sent is not cancelled under the sender
    UPDATE email_deliveries SET status = 'cancelled', last_error = 'cancelled by operator', updated_at = now()
    WHERE dedupe_key = ANY (keys) AND status = 'pending'
    RETURNING dedupe_key;
$$;

CREATE FUNCTION email_delivery_resolve(key text, outcome text) RETURNS SETOF text LANGUAGE sql AS $$
    -- an in_doubt row settled as 'sent' or 'failed' by an operator
    UPDATE email_deliveries
    SET status = outcome, sent_at = CASE WHEN outcome = 'sent' THEN now() END,
        last_error = 'resolved as ' || outcome || ' by an operator; was: ' || coalesce(last_error, 'in doubt'),
        updated_at = now()
    WHERE dedupe_key = key AND status = 'in_doubt' AND outcome IN ('sent', 'failed')
    RETURNING dedupe_key;
$$;

CREATE FUNCTION email_suppress(address text, reason text, source text, expires_at timestamptz)
RETURNS SETOF email_suppressions LANGUAGE sql AS $$
    -- an existing suppression of the address is replaced
    INSERT INTO email_suppressions (address, reason, source, expires_at) VALUES ($1, $2, $3, $4)
    ON CONFLICT (address) DO UPDATE
        SET reason = EXCLUDED.reason, source = EXCLUDED.source, expires_at = EXCLUDED.expires_at,
            created_at = now(), delivery_id = NULL
    RETURNING *;
$$;

REVOKE EXECUTE ON FUNCTION email_delivery_retry(text[], integer, integer), email_delivery_cancel(text[]),
    email_delivery_resolve(text, text), email_suppress(text, text, text, timestamptz) FROM PUBLIC;

-- ---------------------------------------------------------------- the console's doors
--
-- The console's database role changes nothing directly (sql/grants/console_role.sql): it calls
-- these, which run as their owner with a fixed search_path and take the actor from a session row
-- whose user is an operator (the role at sign-in, still the user's), never from the caller. Each
-- action is recorded in email_operator_actions in the same transaction. EXECUTE is revoked from
-- PUBLIC: only the roles granted it may call them.

CREATE FUNCTION email_console_operator(session bytea) RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
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

CREATE FUNCTION email_console_act(session bytea, action text, keys text[], outcome text, default_attempts integer,
                                  detail jsonb)
RETURNS SETOF text LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
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

CREATE FUNCTION email_console_suppress(session bytea, address text, reason text, expires_at timestamptz)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    actor text := email_console_operator(session);
BEGIN
    PERFORM email_suppress(address, reason, 'operator', expires_at);
    INSERT INTO email_operator_actions (actor, action, address, detail)
    VALUES (actor, 'suppress', address, jsonb_build_object('reason', reason, 'expires_at', expires_at));
END;
$$;

CREATE FUNCTION email_console_unsuppress(session bytea, address text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
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

-- Sign-in needs one user's hash at a time; the console's role reads no column password_hash.
CREATE FUNCTION email_console_password_hash(user_name text) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT password_hash FROM email_console_users WHERE name = user_name;
$$;

REVOKE EXECUTE ON FUNCTION email_console_operator(bytea),
    email_console_act(bytea, text, text[], text, integer, jsonb),
    email_console_suppress(bytea, text, text, timestamptz), email_console_unsuppress(bytea, text),
    email_console_password_hash(text) FROM PUBLIC;
