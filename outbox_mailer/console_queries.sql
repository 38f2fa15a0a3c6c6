-- The operator console's statements (outbox_mailer/store/console.py). The email list's WHERE clause
-- is put together there from fixed pieces, every value a parameter. Loaded with queries.sql.

-- name: console_user
-- One console user by name: role and password hash.
SELECT name, role, password_hash FROM email_console_users WHERE name = $1;

-- name: console_user_add
-- Add user $1 with role $2 and Argon2id hash $3; nothing when the name is taken.
INSERT INTO email_console_users (name, role, password_hash) VALUES ($1, $2, $3)
ON CONFLICT (name) DO NOTHING
RETURNING name;

-- name: console_user_remove
-- Remove user $1 and end its sessions; returns the name when there was one.
WITH ended AS (DELETE FROM email_console_sessions WHERE user_name = $1)
DELETE FROM email_console_users WHERE name = $1 RETURNING name;

-- name: console_session_start
-- A signed-in session: the SHA-256 $1 of its token, user $2 with role $3.
INSERT INTO email_console_sessions (token_hash, user_name, role) VALUES ($1, $2, $3);

-- name: console_session
-- The session whose token hashes to $1, when it started less than $2 seconds ago, was seen less than $3 seconds ago, and its user still exists with the same role.
SELECT s.user_name, s.role FROM email_console_sessions s
JOIN email_console_users u ON u.name = s.user_name AND u.role = s.role
WHERE s.token_hash = $1 AND s.started_at > now() - make_interval(secs => $2)
  AND s.seen_at > now() - make_interval(secs => $3);

-- name: console_session_seen
-- The session $1 had a request now (the live refresh is not one).
UPDATE email_console_sessions SET seen_at = now() WHERE token_hash = $1;

-- name: console_session_end
-- End the session $1 (signed out, expired, or its user changed).
DELETE FROM email_console_sessions WHERE token_hash = $1;

-- name: console_sessions_expire
-- Forget sessions started more than $1 seconds ago or not seen for $2 seconds.
DELETE FROM email_console_sessions
WHERE started_at <= now() - make_interval(secs => $1) OR seen_at <= now() - make_interval(secs => $2);

-- name: console_users
-- Every console user, by name (never the hash).
SELECT name, role, created_at FROM email_console_users ORDER BY name;

-- name: record_action
-- What an operator did: actor $1, action $2, dedupe key $3 or address $4, detail $5 (a JSON object).
INSERT INTO email_operator_actions (actor, action, dedupe_key, address, detail) VALUES ($1, $2, $3, $4, $5::jsonb);

-- name: record_actions
-- A bulk action, one row per dedupe key in $3: actor $1, action $2, detail $4.
INSERT INTO email_operator_actions (actor, action, dedupe_key, detail)
SELECT $1, $2, k, $4::jsonb FROM unnest($3::text[]) AS k;

-- name: actions_of
-- What operators did to the email with dedupe key $1, newest first.
SELECT actor, action, at, detail::text AS detail FROM email_operator_actions
WHERE dedupe_key = $1 ORDER BY at DESC, id DESC LIMIT 100;

-- name: email_by_key
-- Every column of one email (the console's page of it).
SELECT * FROM email_deliveries WHERE dedupe_key = $1;

-- name: retry_rows
-- A bulk retry of the rows $1 as `retry` does each: back to pending now with as many new tries as the row's own max_attempts ($2 when null); only rows still failed, cancelled or in_doubt. Returns their keys.
UPDATE email_deliveries d
SET status = 'pending', scheduled_at = now(), max_attempts = d.attempts + coalesce(d.max_attempts, $2::integer),
    last_error = NULL, updated_at = now()
WHERE d.id = ANY ($1::bigint[]) AND d.status IN ('failed', 'cancelled', 'in_doubt')
RETURNING d.dedupe_key;

-- name: cancel_rows
-- A bulk cancel of the rows $1 as `cancel` does each: only rows still pending. Returns their keys.
UPDATE email_deliveries
SET status = 'cancelled', last_error = 'cancelled by operator', updated_at = now()
WHERE id = ANY ($1::bigint[]) AND status = 'pending'
RETURNING dedupe_key;

-- name: console_census
-- Rows by status and transport ($1: the name of the default transport, for rows whose transport is null), with the ids of up to $2 in_doubt rows: one scan of the table, made by the console at most once a minute while it is used (console/census.py).
SELECT status, coalesce(transport, $1) AS transport, count(*) AS n,
       (array_agg(id ORDER BY id DESC) FILTER (WHERE status = 'in_doubt'))[1:$2] AS in_doubt_ids
FROM email_deliveries GROUP BY 1, 2 ORDER BY 2, 1;

-- name: console_queue_counts
-- Rows waiting now by transport ($1: the default transport's name): pending (not claimed) and sending (claimed), from the queue.
SELECT coalesce(transport, $1) AS transport, CASE WHEN claimed_at IS NULL THEN 'pending' ELSE 'sending' END AS status,
       count(*) AS n
FROM email_queue GROUP BY 1, 2;

-- name: console_oldest_due
-- Seconds since the oldest row due now became due (null: none is due), from the queue.
SELECT extract(epoch FROM now() - min(scheduled_at))::float8 FROM email_queue
WHERE claimed_at IS NULL AND scheduled_at <= now();

-- name: console_held
-- Transports whose shared rate is held back by a throttling reply, and until when.
SELECT transport, held_until, rate_share FROM email_transport_limits
WHERE held_until > now() OR rate_share < 1 ORDER BY transport;

-- name: console_outcomes
-- Attempts per time bucket of $1 seconds since $2 ago (the overview's charts): sent, and refused for good (permanent: the email failed).
SELECT to_timestamp(floor(extract(epoch FROM finished_at) / $1) * $1) AS bucket,
       count(*) FILTER (WHERE outcome = 'sent') AS sent,
       count(*) FILTER (WHERE outcome = 'permanent') AS failed
FROM email_delivery_attempts
WHERE finished_at >= now() - make_interval(secs => $2)
GROUP BY 1 ORDER BY 1;

-- name: console_event_rates
-- Emails sent over the last $1 seconds (attempts), and the bounces and complaints received then.
SELECT (SELECT count(*) FROM email_delivery_attempts
        WHERE outcome = 'sent' AND finished_at >= now() - make_interval(secs => $1)) AS sent,
       count(*) FILTER (WHERE kind = 'bounced' AND bounce_class = 'hard') AS hard_bounces,
       count(*) FILTER (WHERE kind = 'bounced') AS bounces,
       count(*) FILTER (WHERE kind = 'complained') AS complaints
FROM email_delivery_events WHERE received_at >= now() - make_interval(secs => $1);

-- name: console_suppressions
-- Suppressions whose address contains $1 (a LIKE pattern; '%' for all), newest first, at most $2.
SELECT address, reason, source, delivery_id, created_at, expires_at FROM email_suppressions
WHERE address LIKE $1 ORDER BY created_at DESC, address LIMIT $2;
