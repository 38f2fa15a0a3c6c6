-- The operator console's statements (outbox_mailer/store/console.py). Loaded with queries.sql.
--
-- The email list and the bulk actions share one parameter layout, every filter a parameter that is
-- null when the filter is absent: $1 created after, $2 created before, $3 and $4 the keyset (created_at,
-- id) the page starts after (null: the first page), $5 what the statement narrows by (its description
-- says), $6 status, $7 transport, $8 the default transport's name (rows whose transport is null are
-- its), $9 recipient (a whole address, any case), $10 dedupe-key prefix, $11 delivery event, $12 the
-- most rows returned. The walk along email_deliveries_created_idx is a range on created_at whatever
-- the filters (an absent bound is infinite), so every plan, generic or not, reads that index.

-- fragment: console_list_columns
-- The columns of a row of the email list.
d.id, d.dedupe_key, d.status, d.transport, d.to_addresses, d.subject, d.attempts, d.created_at,
d.updated_at, d.delivery_event, d.last_error

-- fragment: console_walk_newest
-- Rows created in [$1, $2), before the keyset ($3, $4): the newest-first walk.
d.created_at >= coalesce($1::timestamptz, '-infinity') AND d.created_at < coalesce($2::timestamptz, 'infinity')
AND (d.created_at, d.id) < (coalesce($3::timestamptz, 'infinity'), coalesce($4::bigint, 0))

-- fragment: console_walk_oldest
-- Rows created in [$1, $2), after the keyset ($3, $4): the oldest-first walk.
d.created_at >= coalesce($1::timestamptz, '-infinity') AND d.created_at < coalesce($2::timestamptz, 'infinity')
AND (d.created_at, d.id) > (coalesce($3::timestamptz, '-infinity'), coalesce($4::bigint, 0))

-- fragment: console_matches
-- The filters tested on each row the walk reads ($6 to $11; null: not filtered on).
($6::text IS NULL OR d.status = $6)
AND ($7::text IS NULL OR d.transport = $7 OR ($7 = $8::text AND d.transport IS NULL))
AND ($9::text IS NULL
     OR email_recipient_keys(d.to_addresses, d.cc_addresses, d.bcc_addresses) @> ARRAY[lower(btrim($9))])
AND ($10::text IS NULL OR starts_with(d.dedupe_key, $10))
AND ($11::text IS NULL OR d.delivery_event = $11)

-- fragment: console_selection
-- The rows of the filter that bulk action $5 would change (retry: failed, cancelled or in_doubt ones whose content retention has not removed; cancel: pending ones); $3 and $4 are null.
FROM email_deliveries d
WHERE
    -- include: console_walk_newest
    AND
    -- include: console_matches
    AND CASE $5::text WHEN 'retry' THEN d.status IN ('failed', 'cancelled', 'in_doubt') AND d.scrubbed_at IS NULL
                      WHEN 'cancel' THEN d.status = 'pending' END

-- fragment: console_window
-- The start of a page read from a window of the walk: the list's columns, and whether each row matches the filters; the statement goes on with its walk, its order and the window's size $5.
SELECT
    -- include: console_list_columns
FROM (
    SELECT
        -- include: console_list_columns
        , (
        -- include: console_matches
        ) AS hit
    FROM email_deliveries d
    WHERE

-- fragment: console_narrowed
-- The start of a page narrowed by $5 through an index of its own: the list's columns and the filters; the statement goes on with its narrowing condition, its walk and its order.
SELECT
    -- include: console_list_columns
FROM email_deliveries d
WHERE
    -- include: console_matches
    AND

-- name: console_emails_newest
-- A page of the email list, newest first: the filters tested on a window of at most $5 rows of the walk (a rare match fills its page over several "search older" steps instead of reading the whole table).
-- include: console_window
    -- include: console_walk_newest
    ORDER BY d.created_at DESC, d.id DESC LIMIT $5
) d
WHERE d.hit
ORDER BY d.created_at DESC, d.id DESC LIMIT $12;

-- name: console_emails_to_newest
-- A page of the email list to recipient $5, read through email_deliveries_recipients_idx (no window), newest first.
-- include: console_narrowed
    email_recipient_keys(d.to_addresses, d.cc_addresses, d.bcc_addresses) @> ARRAY[lower(btrim($5::text))]
    AND
    -- include: console_walk_newest
ORDER BY d.created_at DESC, d.id DESC LIMIT $12;

-- name: console_emails_among_newest
-- A page of the email list among the rows with ids $5 (the census's in_doubt rows, their status checked again by the filters), newest first.
-- include: console_narrowed
    d.id = ANY ($5::bigint[])
    AND
    -- include: console_walk_newest
ORDER BY d.created_at DESC, d.id DESC LIMIT $12;

-- name: console_emails_oldest
-- A page of the email list, oldest first: the filters tested on a window of at most $5 rows of the walk (a rare match fills its page over several "search older" steps instead of reading the whole table).
-- include: console_window
    -- include: console_walk_oldest
    ORDER BY d.created_at ASC, d.id ASC LIMIT $5
) d
WHERE d.hit
ORDER BY d.created_at ASC, d.id ASC LIMIT $12;

-- name: console_emails_to_oldest
-- A page of the email list to recipient $5, read through email_deliveries_recipients_idx (no window), oldest first.
-- include: console_narrowed
    email_recipient_keys(d.to_addresses, d.cc_addresses, d.bcc_addresses) @> ARRAY[lower(btrim($5::text))]
    AND
    -- include: console_walk_oldest
ORDER BY d.created_at ASC, d.id ASC LIMIT $12;

-- name: console_emails_among_oldest
-- A page of the email list among the rows with ids $5 (the census's in_doubt rows, their status checked again by the filters), oldest first.
-- include: console_narrowed
    d.id = ANY ($5::bigint[])
    AND
    -- include: console_walk_oldest
ORDER BY d.created_at ASC, d.id ASC LIMIT $12;

-- name: console_window_edge_newest
-- The last row of console_emails_newest's window of $5 rows, and the row after it when there is one (two rows: the walk goes on).
SELECT d.created_at, d.id FROM email_deliveries d
WHERE
    -- include: console_walk_newest
ORDER BY d.created_at DESC, d.id DESC OFFSET $5::integer - 1 LIMIT 2;

-- name: console_window_edge_oldest
-- The last row of console_emails_oldest's window of $5 rows, and the row after it when there is one.
SELECT d.created_at, d.id FROM email_deliveries d
WHERE
    -- include: console_walk_oldest
ORDER BY d.created_at ASC, d.id ASC OFFSET $5::integer - 1 LIMIT 2;

-- name: console_count_selection
-- How many rows bulk action $5 would change among the filter's (console_selection).
SELECT count(*)
-- include: console_selection
;

-- name: console_bulk_selection
-- The keys of the rows bulk action $5 would change among the filter's, at most $12.
SELECT d.dedupe_key
-- include: console_selection
ORDER BY d.id LIMIT $12;

-- name: console_user
-- One console user by name, and its role.
SELECT name, role FROM email_console_users WHERE name = $1;

-- name: console_password_hash
-- The password hash of console user $1 (null: no such user), through the function that is the console role's only way to it.
SELECT email_console_password_hash($1);

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

-- name: actions_of
-- What operators did to the email with dedupe key $1, newest first.
SELECT actor, action, at, detail::text AS detail FROM email_operator_actions
WHERE dedupe_key = $1 ORDER BY at DESC, id DESC LIMIT 100;

-- name: email_by_key
-- Every column of one email (the console's page of it).
SELECT * FROM email_deliveries WHERE dedupe_key = $1;

-- name: console_act
-- Operator action $2 (retry, cancel, resolve as $4) on the rows with keys $3, as the operator of session $1, recorded with detail $6 ($5: the attempts of a retried row whose max_attempts is null). Returns the keys changed.
SELECT k FROM email_console_act($1, $2, $3::text[], $4, $5::integer, $6::jsonb) AS k;

-- name: console_suppress
-- Suppress address $2 for reason $3 until $4 (null: never), as the operator of session $1.
SELECT email_console_suppress($1, $2, $3, $4);

-- name: console_unsuppress
-- Lift the suppression of address $2 as the operator of session $1; whether there was one.
SELECT email_console_unsuppress($1, $2);

-- name: console_session_proxied
-- The session of an action by user $2 with role $3 named by the trusted proxy: made and ended in the action's transaction.
INSERT INTO email_console_sessions (token_hash, user_name, role, by_proxy) VALUES ($1, $2, $3, true);

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
-- Emails sent over the last $1 seconds (attempts), and the emails that bounced or drew a complaint by the events received then: matched events only (anyone can plant events for addresses we never mailed), each email counted once however many events name it.
SELECT (SELECT count(*) FROM email_delivery_attempts
        WHERE outcome = 'sent' AND finished_at >= now() - make_interval(secs => $1)) AS sent,
       count(DISTINCT delivery_id) FILTER (WHERE kind = 'bounced' AND bounce_class = 'hard') AS hard_bounces,
       count(DISTINCT delivery_id) FILTER (WHERE kind = 'bounced') AS bounces,
       count(DISTINCT delivery_id) FILTER (WHERE kind = 'complained') AS complaints
FROM email_delivery_events WHERE received_at >= now() - make_interval(secs => $1) AND delivery_id IS NOT NULL;

-- name: console_suppressions
-- Suppressions whose address contains $1 (a LIKE pattern; '%' for all), newest first, at most $2, with their scope ('': all mail; else a category).
SELECT address, scope, reason, source, delivery_id, created_at, expires_at FROM email_suppressions
WHERE address LIKE $1 ORDER BY created_at DESC, address, scope LIMIT $2;

-- name: console_pause
-- Pause transport $2 for reason $3 until $4 (null: until resumed), as the operator of session $1.
SELECT email_console_pause($1, $2, $3, $4);

-- name: console_resume
-- Lift every pause of transport $2 as the operator of session $1; whether one was in force.
SELECT email_console_resume($1, $2);

-- name: console_template_versions
-- Every version of template $1 in each of its locales (at most $2), newest first within a locale: the template's page. Reads the unique index on (name, locale, version).
SELECT locale, version, created_at, created_by FROM email_templates
WHERE name = $1 ORDER BY locale, version DESC LIMIT $2;
