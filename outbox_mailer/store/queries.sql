-- Every runtime query of outbox-mailer, one named block each.
-- A block starts with `-- name: <name>` followed by a one-line description
-- comment; the name matches the Store method that runs it. Loaded once by
-- outbox_mailer/store/queries.py; tests/integration/test_queries_prepare.py prepares every
-- block against a migrated database.
--
-- Advisory locks: session level, 64-bit, the key of each row given by the SQL
-- function outbox_mailer_lock_key(dedupe_key) (sql/0007_lock_key.sql).

-- fragment: content_size
-- The row d's content size: written by the insert trigger since schema 6 (schema 8 filled it for older rows), computed for a row written past the trigger.
coalesce(d.content_bytes, octet_length(d.subject) + coalesce(octet_length(d.text_body), 0)
         + coalesce(octet_length(d.html_body), 0) + octet_length(d.attachments::text))

-- fragment: fits
-- Whether the row d's content is within the daemon's limit lim.max_bytes.
(
    -- include: content_size
) <= lim.max_bytes

-- fragment: screen_suppressions
-- Whether the row d's recipients are to be looked up among the suppressions after the claim (suppression.py: the normal form is computed in Python): not when the row ignores suppressions, nor when nothing is suppressed at all (checked once per statement).
NOT d.ignore_suppressions AND (SELECT EXISTS (SELECT 1 FROM email_suppressions)) AS screen_suppressions

-- fragment: first_message_id
-- The Message-ID of the row d (message_ids.py): at its first claim '<' 13 hex digits of now() in microseconds and the first 19 of HMAC-SHA256(secret, dedupe key) '@' the sender's domain in lower case '>'; after it, the one it has; a row claimed by a daemon that did not write it (before schema 10, which wrote it with the first outcome, or not at all) gets the form that daemon sent: the HMAC's first 32 hex digits. mid.inner_pad and mid.outer_pad are the secret XOR HMAC's pads, mid.default_from the default sender, mid.fallback the domain used when the sender's is not plain ASCII.
CASE WHEN d.first_attempt_at IS NULL OR d.message_id IS NULL THEN
    '<' || CASE WHEN d.first_attempt_at IS NULL
                THEN lpad(to_hex((date_part('epoch', now()) * 1000000)::bigint), 13, '0') || left(encode(
                     sha256(mid.outer_pad || sha256(mid.inner_pad || convert_to(d.dedupe_key, 'UTF8'))), 'hex'), 19)
                ELSE left(encode(
                     sha256(mid.outer_pad || sha256(mid.inner_pad || convert_to(d.dedupe_key, 'UTF8'))), 'hex'), 32) END
        || '@' || coalesce(lower(substring(coalesce(d.from_address, mid.default_from)
                                           FROM '@([A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)\s*>?\s*$')),
                           mid.fallback) || '>'
ELSE d.message_id END

-- fragment: claimed_row
-- The columns of a claimed row but its message_id, as store/rows.py decodes them; d is the row, lim.max_bytes the daemon's content limit (the content of a larger row is left out). Timestamps as date_part's float8 epoch: extract() would compute a numeric first, a third of the claim's CPU.
d.id, d.dedupe_key, d.claim_token, d.attempts, d.max_attempts, d.transport, d.priority,
date_part('epoch', d.scheduled_at) AS scheduled_at,
date_part('epoch', d.expires_at) AS expires_at,
date_part('epoch', d.created_at) AS created_at,
date_part('epoch', d.first_attempt_at) AS first_attempt_at,
-- a retried row with an attempt whose outcome was unknown: the transport the latest such attempt went to
CASE WHEN d.attempts > 1 THEN (
    SELECT a.transport FROM email_delivery_attempts a
    WHERE a.delivery_id = d.id AND a.outcome = 'ambiguous'
    ORDER BY a.attempt DESC, a.started_at DESC LIMIT 1) END AS pinned_transport,
-- include: content_size
AS content_bytes, d.retry_recipients, d.traceparent, d.unsubscribe_category,
CASE WHEN
    -- include: fits
    THEN d.from_address END AS from_address,
CASE WHEN
    -- include: fits
    THEN d.to_addresses END AS to_addresses,
CASE WHEN
    -- include: fits
    THEN d.cc_addresses END AS cc_addresses,
CASE WHEN
    -- include: fits
    THEN d.bcc_addresses END AS bcc_addresses,
CASE WHEN
    -- include: fits
    THEN d.reply_to END AS reply_to,
CASE WHEN
    -- include: fits
    THEN d.subject END AS subject,
CASE WHEN
    -- include: fits
    THEN d.text_body END AS text_body,
CASE WHEN
    -- include: fits
    THEN d.html_body END AS html_body,
CASE WHEN
    -- include: fits
    THEN d.headers::text END AS headers,
CASE WHEN
    -- include: fits
    THEN d.attachments::text END AS attachments,
CASE WHEN
    -- include: fits
    THEN d.metadata::text END AS metadata,
-- a row naming a stored template (schema 27; null otherwise): the daemon renders the version recorded at INSERT;
-- or a provider's template (schema 29), which the provider renders with template_data
d.template, d.locale, d.template_version, d.provider_template,
CASE WHEN
    -- include: fits
    THEN d.template_data::text END AS template_data,
-- include: screen_suppressions

-- name: claim_due
-- First release this session's advisory locks of keys $6 (outcomes committed earlier; a key held twice appears twice), then claim up to $1 due rows of email_queue for worker $3 with claim token $2, taking the per-key advisory lock of each; rows whose transport (null = $5) is in $4 (paused) are left alone; with $12 not null, a row is taken only while the content loaded for the rows before it (in id order) comes to less than $12 bytes (the first always). The queue row is marked claimed and the email_deliveries row becomes 'sending' (a HOT update: no index of email_deliveries covers a column this changes); its first claim writes its Message-ID (key $8 to $11: fragment first_message_id). The content of a row larger than $7 bytes is not returned (the daemon fails it unread); timestamps come as epoch seconds and JSON as text, so that no value can break the decoding of the whole batch.
WITH released AS (
    -- referenced below as a one-time filter, so it runs once, before any row is locked
    SELECT count(*) FILTER (WHERE pg_advisory_unlock(outbox_mailer_lock_key(k))) AS n
    FROM unnest($6::text[]) AS k
), waiting AS (
    -- the queue alone, in its index's order: however stale the statistics (a backlog just
    -- inserted, not analyzed yet), this walks the index and stops after $1 rows
    SELECT q.delivery_id
    FROM email_queue q
    WHERE q.claimed_at IS NULL AND q.scheduled_at <= now()
      AND coalesce(q.transport, $5::text) <> ALL ($4::text[])
      AND (SELECT n FROM released) >= 0
    ORDER BY q.priority DESC, q.scheduled_at, q.delivery_id
    LIMIT $1
    FOR NO KEY UPDATE SKIP LOCKED
), candidates AS (
    -- the email_deliveries rows locked too: an operator's cancel of the same row waits, or is
    -- skipped, instead of deadlocking; = ANY(ARRAY(...)) rather than a join, here and below, so
    -- that no row estimate can plan a scan of the table
    SELECT d.id AS delivery_id, d.priority, outbox_mailer_lock_key(d.dedupe_key) AS lock_key,
        -- the content the row loads: none above $7 (it is left out)
        CASE WHEN (
            -- include: content_size
        ) <= $7 THEN (
            -- include: content_size
        ) ELSE 0 END AS loaded
    FROM email_deliveries d
    WHERE d.id = ANY (ARRAY(SELECT delivery_id FROM waiting)) AND d.status = 'pending'
    FOR NO KEY UPDATE OF d SKIP LOCKED
), sized AS (
    -- the byte budget spent in the order the queue gives the rows (urgent first), not by age alone
    SELECT delivery_id, lock_key, sum(loaded) OVER (ORDER BY priority DESC, delivery_id) - loaded AS loaded_before
    FROM candidates
), locked AS (
    -- the claim's byte budget first (CASE: no lock is taken for a row left out)
    SELECT delivery_id FROM sized
    WHERE CASE WHEN $12::bigint IS NULL OR loaded_before < $12 THEN pg_try_advisory_lock(lock_key) ELSE false END
), queued AS (
    UPDATE email_queue q SET claimed_at = now() WHERE q.delivery_id = ANY (ARRAY(SELECT delivery_id FROM locked))
), claimed AS (
    UPDATE email_deliveries d
    SET status = 'sending', claim_token = $2, claimed_at = now(), claimed_by = $3,
        attempts = d.attempts + 1, first_attempt_at = coalesce(d.first_attempt_at, now()), updated_at = now(),
        message_id =
            -- include: first_message_id
    FROM (SELECT $7::bigint AS max_bytes) lim,
         (SELECT $8::bytea AS inner_pad, $9::bytea AS outer_pad, $10::text AS default_from, $11::text AS fallback) mid
    WHERE d.id = ANY (ARRAY(SELECT delivery_id FROM locked))
    RETURNING d.message_id,  -- the new row's: the expression above is computed once
        -- include: claimed_row
)
SELECT * FROM claimed ORDER BY priority DESC, scheduled_at, id;

-- name: wake_claimers
-- Wake every daemon's claim loop (the channel the insert trigger notifies): an outcome write of this session made a row due now, which no trigger announces for it (schema 26).
SELECT pg_notify('outbox_mailer', '');

-- name: release_locks
-- Release this session's advisory locks of the given dedupe keys (after their outcome committed).
SELECT count(*) FILTER (WHERE pg_advisory_unlock(outbox_mailer_lock_key(k)))
FROM unnest($1::text[]) AS k;

-- name: relock
-- After a reconnect, take the advisory locks of in-flight keys again; returns the keys another session holds.
SELECT k AS dedupe_key
FROM unnest($1::text[]) AS k
WHERE NOT pg_try_advisory_lock(outbox_mailer_lock_key(k));

-- name: record_outcomes
-- Apply decided transitions, fenced on (id, status = 'sending', claim_token), and keep email_queue (settled rows leave it, retried rows wait in it again); write every attempt. A claim given back untried has no attempt (its outcome $14 is null): nothing is written for it and the row keeps its last_error. Returns the ids updated. Parameters: store/outcomes.py OUTCOME_COLUMNS, named as in the unnest aliases below.
WITH decided AS (
    SELECT *
    FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::timestamptz[], $5::text[], $6::text[],
                $7::timestamptz[], $8::integer[], $9::text[], $10::text[], $21::text[], $14::text[])
         AS o(delivery_id, claim_token, status, scheduled_at, last_error, provider_message_id, sent_at, refund,
              retry_recipients, refused_recipients, message_id, outcome)
), updated AS (
    UPDATE email_deliveries d
    SET status = o.status,
        scheduled_at = coalesce(o.scheduled_at, d.scheduled_at),
        last_error = CASE WHEN o.outcome IS NULL THEN d.last_error ELSE o.last_error END,
        provider_message_id = coalesce(o.provider_message_id, d.provider_message_id),
        message_id = coalesce(d.message_id, o.message_id),  -- a rescued claim of a daemon that did not write it
        sent_at = o.sent_at,
        attempts = d.attempts - o.refund,
        retry_recipients = CASE WHEN o.retry_recipients IS NOT NULL
                                THEN ARRAY(SELECT jsonb_array_elements_text(o.retry_recipients::jsonb)) END,
        refused_recipients = CASE WHEN o.refused_recipients IS NULL THEN d.refused_recipients
                                  ELSE d.refused_recipients
                                       || ARRAY(SELECT jsonb_array_elements_text(o.refused_recipients::jsonb)) END,
        claim_token = NULL,
        updated_at = now()
    FROM decided o
    WHERE d.id = ANY ($1::bigint[]) AND d.id = o.delivery_id AND d.status = 'sending' AND d.claim_token = o.claim_token
    RETURNING d.id, d.status, d.scheduled_at, o.provider_message_id, o.message_id  -- (the last two: the outcome's)
), dequeued AS (
    -- settled rows leave the queue; a row to retry waits there again, with its new schedule
    -- (= ANY(ARRAY(...)) keeps both on the queue's primary key whatever the plan's row estimate)
    DELETE FROM email_queue q
    WHERE q.delivery_id = ANY (ARRAY(SELECT id FROM updated WHERE status <> 'pending'))
), requeued AS (
    UPDATE email_queue q SET claimed_at = NULL, scheduled_at = u.scheduled_at, batch_id = NULL
    FROM unnest(ARRAY(SELECT id FROM updated WHERE status = 'pending'),
                ARRAY(SELECT scheduled_at FROM updated WHERE status = 'pending')) AS u(id, scheduled_at)
    WHERE q.delivery_id = ANY (ARRAY(SELECT id FROM updated WHERE status = 'pending')) AND q.delivery_id = u.id
), attempt AS (
    INSERT INTO email_delivery_attempts
        (delivery_id, attempt, started_at, finished_at, outcome, reply_code, enhanced_code, error, transport, worker,
         refused, message_id, provider_message_id, reply)
    SELECT a.*
    FROM unnest($1::bigint[], $11::integer[], $12::timestamptz[], $13::timestamptz[], $14::text[],
                $15::smallint[], $16::text[], $17::text[], $18::text[], $19::text[], $20::text[]::jsonb[],
                $21::text[], $6::text[], $22::text[])
         AS a(delivery_id, attempt, started_at, finished_at, outcome, reply_code, enhanced_code, error, transport,
              worker, refused, message_id, provider_message_id, reply)
    WHERE a.delivery_id = ANY (ARRAY(SELECT e.id FROM email_deliveries e WHERE e.id = ANY ($1::bigint[])))
      AND a.outcome IS NOT NULL
    ON CONFLICT (delivery_id, attempt, started_at) DO NOTHING
)
-- quoted: an event that matched no row quotes this outcome's provider id or Message-ID (it came before
-- it; two probes of the partial indexes of such events, schema 20): the recorder matches it next;
-- due: the row waits again and is due now (a claim given back untried): the session wakes the claimers
SELECT u.id, u.status = 'pending' AND u.scheduled_at <= now() AS due,
       EXISTS (SELECT 1 FROM email_delivery_events v
               WHERE v.delivery_id IS NULL AND v.quoted_provider_message_id = u.provider_message_id)
       OR EXISTS (SELECT 1 FROM email_delivery_events v
                  WHERE v.delivery_id IS NULL AND v.quoted_message_id = u.message_id) AS quoted
FROM updated u;

-- name: record_attempts
-- Write attempts of rows that stay as they are (a batch given up to a rescuer after an ambiguous answer); the rows' outcome is written when they are settled.
INSERT INTO email_delivery_attempts
    (delivery_id, attempt, started_at, finished_at, outcome, reply_code, enhanced_code, error, transport, worker,
     message_id)
SELECT *
FROM unnest($1::bigint[], $2::integer[], $3::timestamptz[], $4::timestamptz[], $5::text[], $6::smallint[],
            $7::text[], $8::text[], $9::text[], $10::text[], $11::text[])
ON CONFLICT (delivery_id, attempt, started_at) DO NOTHING;

-- name: attempts_recorded
-- Which of these attempts (delivery id, attempt, start) are already written: after a lost COMMIT reply, they were ours.
SELECT a.delivery_id
FROM email_delivery_attempts a
JOIN unnest($1::bigint[], $2::integer[], $3::timestamptz[]) AS w(delivery_id, attempt, started_at)
  ON a.delivery_id = w.delivery_id AND a.attempt = w.attempt AND a.started_at = w.started_at
WHERE a.delivery_id = ANY ($1::bigint[]);

-- name: next_due_at
-- When the earliest waiting row becomes due, in epoch seconds (null when there is none).
SELECT date_part('epoch', min(scheduled_at)) AS next_due_at FROM email_queue WHERE claimed_at IS NULL;

-- name: find_dead_claims
-- Claims (found through email_queue) older than $1 seconds, or of the workers $9 whose processes are provably dead (processes.py; under this process's own name $10, only claims made before it started, $11), whose advisory lock nobody holds, except this session's own rows $3 (session locks are re-entrant), and with each such row sent in a recorded batch every other member still 'sending' in that batch, whatever its own claim time (a batch is rescued whole: its request was made after every member's claim, so it ended before the oldest member's claim became due); locks each for this session. Columns as claim_due returns them (content left out above $4 bytes; the Message-ID that was sent, from the key $5 to $8, where the claiming daemon did not write it), with the claim, the batch the row was sent in (null: sent alone) and how many rows are still in that batch (the rescuer takes a batch only when it holds them all), and the transport its claim was sent through when not its own (record_carrier; null: its own or its pinned one).
WITH stale AS (
    SELECT d.id AS delivery_id, outbox_mailer_lock_key(d.dedupe_key) AS lock_key
    FROM email_deliveries d
    WHERE d.id = ANY (ARRAY(SELECT q.delivery_id FROM email_queue q WHERE q.claimed_at IS NOT NULL))
      AND d.status = 'sending'
      AND (d.claimed_at < now() - make_interval(secs => $1)
           OR (d.claimed_by = ANY ($9::text[]) AND (d.claimed_by <> $10 OR d.claimed_at < $11)
               -- a batch request may still be open at the provider: it waits the delay, as its key's answer would
               AND NOT EXISTS (SELECT 1 FROM email_queue b WHERE b.delivery_id = d.id AND b.batch_id IS NOT NULL)))
      AND d.id <> ALL ($3::bigint[])
    ORDER BY d.claimed_at
    LIMIT $2
    FOR NO KEY UPDATE OF d SKIP LOCKED
), mates AS (
    -- the other members of the batches those rows went in (walks email_queue_batch_idx)
    SELECT d.id AS delivery_id, outbox_mailer_lock_key(d.dedupe_key) AS lock_key
    FROM email_deliveries d
    WHERE d.id = ANY (ARRAY(
              SELECT m.delivery_id FROM email_queue m
              WHERE m.batch_id = ANY (ARRAY(
                  SELECT q.batch_id FROM email_queue q
                  WHERE q.delivery_id = ANY (ARRAY(SELECT delivery_id FROM stale)) AND q.batch_id IS NOT NULL))))
      AND d.id <> ALL (ARRAY(SELECT delivery_id FROM stale))
      AND d.status = 'sending'
      AND d.id <> ALL ($3::bigint[])
    FOR NO KEY UPDATE OF d SKIP LOCKED
), locked AS (
    SELECT delivery_id FROM stale WHERE pg_try_advisory_lock(lock_key)
    UNION ALL
    SELECT delivery_id FROM mates WHERE pg_try_advisory_lock(lock_key)
)
SELECT
    -- include: first_message_id
    AS message_id,
    -- include: claimed_row
    , d.claimed_at, d.claimed_by, b.batch_id,
    (SELECT count(*) FROM email_queue m WHERE m.batch_id = b.batch_id) AS batch_rows,
    (SELECT q.carrier FROM email_queue q WHERE q.delivery_id = d.id AND q.carrier_claim_token = d.claim_token)
        AS carrier
FROM email_deliveries d
CROSS JOIN LATERAL (SELECT (SELECT q.batch_id FROM email_queue q WHERE q.delivery_id = d.id) AS batch_id) b,
     (SELECT $4::bigint AS max_bytes) lim,
     (SELECT $5::bytea AS inner_pad, $6::bytea AS outer_pad, $7::text AS default_from, $8::text AS fallback) mid
WHERE d.id = ANY (ARRAY(SELECT delivery_id FROM locked));

-- name: record_carrier
-- Before a send of row $1 through transport $3, not its own: record it for a rescuer, with the claim ($2) it belongs to and fenced on it (an earlier claim's carrier is never read for a later one). Returns the row id; none when the claim was lost.
UPDATE email_queue q SET carrier = $3, carrier_claim_token = $2
FROM email_deliveries d
WHERE q.delivery_id = $1 AND d.id = $1 AND d.status = 'sending' AND d.claim_token = $2
RETURNING q.delivery_id;

-- name: open_batch
-- Before a batch request: record batch transport $1, key $2, members $3 (request order), each member's screened recipients $5 (JSON [[to, cc, bcc], ...], request order) and the request's digest $6, and point each member's queue row at it, fenced on each member's claim ($4 claim tokens). Returns the batch id and how many members were still ours.
WITH batch AS (
    INSERT INTO email_batches (transport, idempotency_key, member_ids, recipients, request_digest)
    VALUES ($1, $2, $3::bigint[], $5::text::jsonb, $6)
    RETURNING id
), members AS (
    UPDATE email_queue q SET batch_id = b.id
    FROM batch b, unnest($3::bigint[], $4::uuid[]) AS m(id, claim_token), email_deliveries d
    WHERE q.delivery_id = ANY ($3::bigint[]) AND d.id = ANY ($3::bigint[])
      AND q.delivery_id = m.id AND d.id = m.id AND d.status = 'sending' AND d.claim_token = m.claim_token
    RETURNING q.delivery_id
)
SELECT (SELECT id FROM batch) AS id, (SELECT count(*) FROM members) AS members;

-- name: batches
-- The recorded batches with these ids: key, members in request order, requests made so far, the members' recipients as sent (JSON text) and the request's digest.
SELECT id, transport, idempotency_key, member_ids, sends, recipients::text AS recipients, request_digest
FROM email_batches WHERE id = ANY($1::bigint[]);

-- name: batch_resent
-- Before a rescuer resends batch $1: one more request under its key. Returns the requests made, this one included.
UPDATE email_batches SET sends = sends + 1 WHERE id = $1 RETURNING sends;

-- name: process_seen
-- This daemon process says who it is (schema 13: boot id $1, pid namespace $2, pid $3, start ticks $4, worker $5); processes not seen for $6 seconds are forgotten. Returns the processes known (as this statement began) of every worker that has one in this boot and pid namespace.
WITH seen AS (
    INSERT INTO email_daemon_processes (boot_id, pid_ns, pid, start_ticks, worker) VALUES ($1::uuid, $2, $3, $4, $5)
    ON CONFLICT (boot_id, pid_ns, pid, start_ticks) DO UPDATE SET seen_at = now(), worker = EXCLUDED.worker
), forgotten AS (
    DELETE FROM email_daemon_processes WHERE seen_at < now() - make_interval(secs => $6)
)
SELECT p.boot_id::text AS boot_id, p.pid_ns, p.pid, p.start_ticks, p.worker
FROM email_daemon_processes p
WHERE p.worker = ANY (ARRAY(SELECT h.worker FROM email_daemon_processes h WHERE h.boot_id = $1::uuid AND h.pid_ns = $2));

-- name: process_gone
-- A daemon process stopping cleanly forgets itself (schema 13).
DELETE FROM email_daemon_processes WHERE boot_id = $1::uuid AND pid_ns = $2 AND pid = $3 AND start_ticks = $4;

-- name: dead_claims_left
-- How many rows the workers $1 still hold 'sending', this session's own $2 left out.
SELECT count(*) FROM email_deliveries d
WHERE d.id = ANY (ARRAY(SELECT q.delivery_id FROM email_queue q WHERE q.claimed_at IS NOT NULL))
  AND d.status = 'sending' AND d.claimed_by = ANY ($1::text[]) AND d.id <> ALL ($2::bigint[]);

-- name: prune_batches
-- Batches older than $1 seconds that no queue row points at any more.
DELETE FROM email_batches b
WHERE b.created_at < now() - make_interval(secs => $1)
  AND NOT EXISTS (SELECT 1 FROM email_queue q WHERE q.batch_id = b.id);

-- name: status_by_keys
-- The contract columns of the rows with these dedupe keys.
SELECT id, dedupe_key, status, attempts, max_attempts, transport, priority, scheduled_at, expires_at,
       last_error, provider_message_id, sent_at, created_at, updated_at,
       to_addresses, subject, message_id, delivery_event, delivery_event_at
FROM email_deliveries
WHERE dedupe_key = ANY($1::text[]);

-- name: attempts_of
-- Every attempt of one delivery, oldest first.
SELECT attempt, started_at, finished_at, outcome, reply_code, enhanced_code, error, transport, worker,
       refused::text AS refused, message_id, provider_message_id, reply
FROM email_delivery_attempts
WHERE delivery_id = $1
ORDER BY attempt, id;

-- name: enqueue
-- Insert one email unless its dedupe key exists: its own subject and bodies, or a template ($20) with its data and locale (schema 27). Returns the new id, or nothing for a duplicate.
INSERT INTO email_deliveries
    (dedupe_key, from_address, to_addresses, cc_addresses, bcc_addresses, reply_to, subject, text_body,
     html_body, headers, attachments, metadata, transport, priority, scheduled_at, expires_at, max_attempts,
     ignore_suppressions, unsubscribe_category, template, template_data, locale)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, coalesce($15, now()), $16, $17, $18, $19,
        $20, $21, $22)
ON CONFLICT (dedupe_key) DO NOTHING
RETURNING id;

-- name: list_by_status
-- Rows with a status in $1 changed in the last $2 seconds, newest first, at most $3.
SELECT dedupe_key, status, attempts, transport, to_addresses, subject, scheduled_at, sent_at, last_error,
       created_at, updated_at
FROM email_deliveries
WHERE status = ANY ($1::text[]) AND updated_at >= now() - make_interval(secs => $2)
ORDER BY updated_at DESC, id DESC
LIMIT $3;

-- name: count_retryable
-- How many rows of status $1 changed in the last $2 seconds a bulk retry would requeue (retryable), and how many it leaves because retention removed their content (scrubbed).
SELECT count(*) FILTER (WHERE scrubbed_at IS NULL) AS retryable, count(scrubbed_at) AS scrubbed
FROM email_deliveries
WHERE status = $1 AND status IN ('failed', 'cancelled', 'in_doubt')
  AND updated_at >= now() - make_interval(secs => $2);

-- name: retry_bulk
-- Requeue up to $4 rows of status $1 changed in the last $2 seconds, due now, each with $3 more attempts (null: as many as its own max_attempts, or $5 when that is null); never a row whose content retention removed.
WITH batch AS (
    SELECT id FROM email_deliveries
    WHERE status = $1 AND status IN ('failed', 'cancelled', 'in_doubt') AND scrubbed_at IS NULL
      AND updated_at >= now() - make_interval(secs => $2)
    ORDER BY id
    LIMIT $4
    FOR UPDATE SKIP LOCKED
)
UPDATE email_deliveries d
SET status = 'pending', scheduled_at = now(), max_attempts = d.attempts + coalesce($3::integer, d.max_attempts, $5::integer),
    last_error = NULL, updated_at = now()
FROM batch WHERE d.id = batch.id;

-- name: retry
-- Put a failed, cancelled or in_doubt row back to pending now, with $2 more attempts allowed; never a row whose content retention removed (the rule: sql/0022).
SELECT k FROM email_delivery_retry(ARRAY[$1::text], $2::integer, NULL) AS k;

-- name: resolve
-- An operator settles an in_doubt row as sent ($2 = 'sent') or failed ($2 = 'failed') (the rule: sql/0022).
SELECT k FROM email_delivery_resolve($1::text, $2::text) AS k;

-- name: cancel
-- Cancel a pending row (the rule: sql/0022).
SELECT k FROM email_delivery_cancel(ARRAY[$1::text]) AS k;

-- name: status_of
-- The status of one row and whether retention removed its content (to explain why retry/cancel did nothing).
SELECT status, scrubbed_at IS NOT NULL AS scrubbed FROM email_deliveries WHERE dedupe_key = $1;

-- name: count_pending
-- Rows waiting to be sent (for the daemon's status line).
SELECT count(*) FROM email_queue WHERE claimed_at IS NULL;

-- name: stats
-- Counts per status, rows due now, and the age of the oldest due row.
SELECT
    count(*) FILTER (WHERE status = 'pending')   AS pending,
    count(*) FILTER (WHERE status = 'sending')   AS sending,
    count(*) FILTER (WHERE status = 'sent')      AS sent,
    count(*) FILTER (WHERE status = 'failed')    AS failed,
    count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
    count(*) FILTER (WHERE status = 'in_doubt')  AS in_doubt,
    count(*) FILTER (WHERE status = 'pending' AND scheduled_at <= now()) AS due_now,
    extract(epoch FROM now() - min(scheduled_at) FILTER (WHERE status = 'pending' AND scheduled_at <= now()))
        AS oldest_due_age_seconds
FROM email_deliveries;

-- name: count_unfinished
-- How many rows the daemon still has to settle (pending or sending; in_doubt waits for an operator): the demo waits for zero.
SELECT count(*) FROM email_deliveries WHERE status IN ('pending', 'sending');

-- name: scrub_batch
-- Retention: remove bodies (a template row's data: schema 27; a provider template's model: schema 29), attachments and custom headers of up to $2 final rows last changed before now() - $1 seconds. Walks email_deliveries_unscrubbed_idx (created_at; a row's updated_at is never before its created_at), which the hot path never changes.
WITH batch AS (
    SELECT id FROM email_deliveries
    WHERE scrubbed_at IS NULL AND created_at < now() - make_interval(secs => $1)
      AND status IN ('sent', 'failed', 'cancelled') AND updated_at < now() - make_interval(secs => $1)
    ORDER BY created_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE email_deliveries d
SET text_body = CASE WHEN d.template IS NULL AND d.provider_template IS NULL THEN '' END, html_body = NULL,
    template_data = CASE WHEN d.template IS NOT NULL OR d.provider_template IS NOT NULL THEN '{}'::jsonb END,
    attachments = '[]', headers = '{}', scrubbed_at = now()
FROM batch WHERE d.id = batch.id;

-- name: delete_batch
-- Retention: delete up to $2 final rows (and their attempts) last changed before now() - $1 seconds. Walks email_deliveries_created_idx.
WITH batch AS (
    SELECT id FROM email_deliveries
    WHERE created_at < now() - make_interval(secs => $1)
      AND status IN ('sent', 'failed', 'cancelled') AND updated_at < now() - make_interval(secs => $1)
    ORDER BY created_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM email_deliveries d USING batch WHERE d.id = batch.id;

-- name: delete_unmatched_events
-- Retention: delete up to $2 delivery events that matched no row and were received before now() - $1 seconds (a matched event goes with its row). Walks email_delivery_events_received_idx.
WITH batch AS (
    SELECT id FROM email_delivery_events
    WHERE received_at < now() - make_interval(secs => $1) AND delivery_id IS NULL
    ORDER BY received_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM email_delivery_events e USING batch WHERE e.id = batch.id;

-- name: forget_webhook_tokens
-- Retention: forget up to $2 webhook tokens seen before now() - $1 seconds (a request signed that long ago is refused by its timestamp anyway). Walks email_webhook_tokens_seen_idx.
WITH batch AS (
    SELECT provider, token FROM email_webhook_tokens
    WHERE seen_at < now() - make_interval(secs => $1)
    ORDER BY seen_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM email_webhook_tokens t USING batch WHERE t.provider = batch.provider AND t.token = batch.token;

-- name: count_prunable
-- How many final rows prune would scrub ($1) and delete ($2), for the progress display.
SELECT
    count(*) FILTER (WHERE scrubbed_at IS NULL AND updated_at < now() - make_interval(secs => $1)) AS to_scrub,
    count(*) FILTER (WHERE updated_at < now() - make_interval(secs => $2)) AS to_delete
FROM email_deliveries
WHERE created_at < now() - make_interval(secs => least($1, $2))
  AND status IN ('sent', 'failed', 'cancelled') AND updated_at < now() - make_interval(secs => least($1, $2));

-- name: claim_session
-- The claim session's settings, once at connect. It keeps email_queue itself (claim_due, record_outcomes), so the trigger that mirrors other sessions' changes leaves its transitions alone. Its plans are made once (generic): planning the claim afresh cost as much CPU as running it for 8 rows. A generic plan is made from the statistics of its moment and kept while the tables grow (made on an empty queue, the claim then scanned 200,000 rows), so every statement of this session reaches its rows through an index, from its parameters (= ANY(...) where a join's row estimate could choose a scan), and sequential, bitmap, nested-loop and merge plans are off, leaving PostgreSQL no other plan (a join is a hash of two such index scans: a nested loop would rescan its inner side once per outer row, n² for a batch); jit off, since a disabled node's cost would make every statement look worth compiling. tests/integration/test_claim_plans.py holds it.
SELECT set_config('outbox_mailer.keeps_queue', 'on', false), set_config('plan_cache_mode', 'force_generic_plan', false),
       set_config('enable_seqscan', 'off', false), set_config('enable_bitmapscan', 'off', false),
       set_config('enable_nestloop', 'off', false), set_config('enable_mergejoin', 'off', false),
       set_config('jit', 'off', false);

-- name: mark_probe_session
-- The pooler check (store/pooler.py), first on each probing connection: its server process, and a mark ($1, a token of that connection's own) set for the rest of the server session, not only the transaction.
SELECT pg_backend_pid() AS pid, set_config('outbox_mailer.session_probe', $1, false) AS mark;

-- name: probe_session
-- The pooler check, then, each statement a transaction of its own: the server process it runs in and the mark that server session carries (null or empty: none).
SELECT pg_backend_pid() AS pid, current_setting('outbox_mailer.session_probe', true) AS mark;

-- name: ensure_migrations_table
-- The migration runner's own bookkeeping.
CREATE TABLE IF NOT EXISTS outbox_mailer_migrations (
    version    integer PRIMARY KEY,
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: lock_migrations
-- Serialise concurrent migrate runs (held for the transaction).
SELECT pg_advisory_xact_lock(hashtextextended('outbox-mailer:migrate', 0));

-- name: applied_migrations
-- Versions already applied, with their checksums.
SELECT version, name, checksum FROM outbox_mailer_migrations ORDER BY version;

-- name: record_migration
-- Remember that a migration was applied.
INSERT INTO outbox_mailer_migrations (version, name, checksum) VALUES ($1, $2, $3);

-- name: schema_version
-- Highest applied migration, or null (table exists but empty). Fails if the table is missing.
SELECT max(version) AS version FROM outbox_mailer_migrations;

-- name: match_delivery
-- The row an event is about: by the provider's message id ($1) on an attempt, else by our Message-ID ($2) on an attempt, else by dedupe key ($3); null when none matches. Served by indexes on email_delivery_attempts, which the hot path only inserts. With the row's recipients, which the event's recipient must be one of to count when it came by mail (event_intake.py).
WITH found AS (
    SELECT coalesce(
        (SELECT a.delivery_id FROM email_delivery_attempts a
         WHERE $1::text IS NOT NULL AND a.provider_message_id = $1 ORDER BY a.id DESC LIMIT 1),
        (SELECT a.delivery_id FROM email_delivery_attempts a
         WHERE $2::text IS NOT NULL AND a.message_id = $2 ORDER BY a.id DESC LIMIT 1),
        (SELECT d.id FROM email_deliveries d WHERE $3::text IS NOT NULL AND d.dedupe_key = $3)) AS delivery_id
)
SELECT f.delivery_id, d.to_addresses || coalesce(d.cc_addresses, '{}') || coalesce(d.bcc_addresses, '{}') AS recipients
FROM found f LEFT JOIN email_deliveries d ON d.id = f.delivery_id;

-- name: tagged_delivery
-- The row a verified bounce address tag names ($1), if it still exists, with its recipients (as match_delivery returns them).
SELECT d.id AS delivery_id, d.to_addresses || coalesce(d.cc_addresses, '{}') || coalesce(d.bcc_addresses, '{}') AS recipients
FROM email_deliveries d WHERE d.id = $1;

-- name: record_event
-- Write one event once (unique on provider $2 and event id $3), matched to row $1 (null: none yet; then it keeps the provider's message id $9 and the Message-ID $10 it quotes, by which the write of its row's outcome matches it: waiting_events). Returns its id when it is new, nothing for a provider's retry; apply_events does the rest.
INSERT INTO email_delivery_events
    (delivery_id, provider, provider_event_id, kind, bounce_class, recipient, occurred_at, detail,
     quoted_provider_message_id, quoted_message_id)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8::text::jsonb, $9, $10)
ON CONFLICT (provider, provider_event_id) DO NOTHING
RETURNING id;

-- name: apply_events
-- What new or newly matched events $1 do, each about row $2 (null: none) and counting or not ($3: a bounce by mail counts only for a recipient of the row it matched, event_intake.py): each is matched to its row; the latest that counts of each row becomes its delivery_event unless a later one is there; each that counts suppresses $4 (its recipient's normal form) for reason $5 (null: nothing; an address already suppressed keeps its first reason).
WITH e AS (
    SELECT u.*, v.provider, v.kind, coalesce(v.occurred_at, v.received_at) AS at
    FROM unnest($1::bigint[], $2::bigint[], $3::boolean[], $4::text[], $5::text[])
         AS u(id, delivery_id, counts, address, reason)
    JOIN email_delivery_events v ON v.id = u.id
    WHERE v.id = ANY ($1::bigint[])
), matched AS (
    UPDATE email_delivery_events v SET delivery_id = e.delivery_id
    FROM e
    WHERE v.id = ANY ($1::bigint[]) AND v.id = e.id AND v.delivery_id IS NULL AND e.delivery_id IS NOT NULL
), latest AS (
    UPDATE email_deliveries d SET delivery_event = e.kind, delivery_event_at = e.at
    FROM (SELECT DISTINCT ON (delivery_id) delivery_id, kind, at FROM e
          WHERE counts AND delivery_id IS NOT NULL AND kind IN ('delivered', 'delayed', 'bounced', 'complained')
          ORDER BY delivery_id, at DESC) e
    WHERE d.id = ANY ($2::bigint[]) AND d.id = e.delivery_id
      AND (d.delivery_event_at IS NULL OR d.delivery_event_at <= e.at)
)
INSERT INTO email_suppressions (address, reason, source, delivery_id)
SELECT DISTINCT ON (address) address, reason, provider, delivery_id FROM e
WHERE counts AND reason IS NOT NULL AND address IS NOT NULL
ORDER BY address, at
ON CONFLICT (address, scope) DO NOTHING;

-- name: waiting_events
-- Events that matched no row and quote the provider's message id ($2) or the Message-ID ($3) of the outcome just written for row $1 (they came before it), locked, each with that row and the row's recipients. Served by the partial indexes of unmatched events' quoted ids (schema 20).
WITH w AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[]) AS w(delivery_id, provider_message_id, message_id)
), found AS (
    SELECT v.id, w.delivery_id FROM email_delivery_events v JOIN w ON v.quoted_provider_message_id = w.provider_message_id
    WHERE v.delivery_id IS NULL AND v.quoted_provider_message_id = ANY ($2::text[])
    UNION
    SELECT v.id, w.delivery_id FROM email_delivery_events v JOIN w ON v.quoted_message_id = w.message_id
    WHERE v.delivery_id IS NULL AND v.quoted_message_id = ANY ($3::text[])
)
SELECT v.id, f.delivery_id, v.provider, v.kind, v.bounce_class, v.recipient,
       d.to_addresses || coalesce(d.cc_addresses, '{}') || coalesce(d.bcc_addresses, '{}') AS recipients
FROM found f
JOIN email_delivery_events v ON v.id = f.id
JOIN email_deliveries d ON d.id = f.delivery_id
WHERE v.id = ANY (ARRAY(SELECT id FROM found)) AND d.id = ANY ($1::bigint[]) AND v.delivery_id IS NULL
FOR UPDATE OF v SKIP LOCKED;

-- name: old_form_suppressions
-- Suppressions written before schema 20, whose address may be in an older form (0020_envelope_suppressions.sql), oldest first, locked.
SELECT address FROM email_suppressions WHERE address_form < 2 ORDER BY created_at, address FOR UPDATE;

-- name: rewrite_suppressions
-- Put the suppressions $1 (written before schema 20) under the addresses $2 (their envelope form; the same address when it is already in it, or is no address) and mark them of form 2: where that address is suppressed already (or twice among them), the first keeps it and the others go.
WITH old AS (
    SELECT * FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS o(address, normal, n)
), moved AS (
    DELETE FROM email_suppressions s USING old WHERE s.address = old.address AND s.address <> old.normal
    RETURNING old.n, old.normal, s.reason, s.source, s.delivery_id, s.created_at, s.expires_at
), added AS (
    INSERT INTO email_suppressions (address, reason, source, delivery_id, created_at, expires_at)
    SELECT DISTINCT ON (normal) normal, reason, source, delivery_id, created_at, expires_at FROM moved ORDER BY normal, n
    ON CONFLICT (address, scope) DO NOTHING
)
UPDATE email_suppressions SET address_form = 2  -- the others were moved: their new rows are of form 2
WHERE address = ANY (ARRAY(SELECT address FROM old WHERE address = normal));

-- name: remember_token
-- A provider's single-use token ($2, with the SHA-256 of its body $3): true when it is new, or was seen with this same body (the provider retrying); false when it came with another body (a replay).
WITH seen AS (
    INSERT INTO email_webhook_tokens (provider, token, body_sha256) VALUES ($1, $2, $3)
    ON CONFLICT (provider, token) DO NOTHING
    RETURNING true
)
SELECT EXISTS (SELECT 1 FROM seen)
    OR EXISTS (SELECT 1 FROM email_webhook_tokens WHERE provider = $1 AND token = $2 AND body_sha256 = $3);

-- name: suppressions_among
-- Which of these addresses ($1, each in the normal form: suppression.py) are suppressed now for all mail or for one of the categories $2, with the scope and as 'address reason YYYY-MM-DD' (a category's reason as 'unsubscribe/newsletter'; what Delivery.suppressed holds): the daemon's one look-up per claimed batch. Served by the primary key (address, scope).
SELECT s.address, s.scope,
       s.address || ' ' || s.reason || CASE WHEN s.scope = '' THEN '' ELSE '/' || s.scope END || ' '
       || to_char(s.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS noted
FROM email_suppressions s
WHERE s.address = ANY ($1::text[]) AND (s.scope = '' OR s.scope = ANY ($2::text[]))
  AND (s.expires_at IS NULL OR s.expires_at > now());

-- name: suppress
-- Suppress address $1 (normal form) for reason $2 from source $3, expiring at $4 (null: never), for scope $5 ('': all mail; else a category); an existing suppression of that address and scope is replaced. Returns the row.
SELECT address, scope, reason, source, delivery_id, created_at, expires_at FROM email_suppress($1, $2, $3, $4, $5);

-- name: unsubscribe
-- A one-click unsubscribe: suppress address $1 (normal form) for category $2, from row $3 (null when it is gone), unless it is suppressed for that category already (a replayed token changes nothing). Returns whether it was new.
WITH added AS (
    INSERT INTO email_suppressions (address, scope, reason, source, delivery_id)
    SELECT $1, $2, 'unsubscribe', 'one-click', (SELECT id FROM email_deliveries WHERE id = $3)
    ON CONFLICT (address, scope) DO NOTHING
    RETURNING true
)
SELECT EXISTS (SELECT 1 FROM added);

-- name: unsuppress
-- Lift the suppression of address $1 for scope $2 ('': all mail; else a category); returns whether there was one.
DELETE FROM email_suppressions WHERE address = $1 AND scope = $2 RETURNING address;

-- name: suppressions
-- Every suppression, newest first, expired ones included (expires_at says so), with its scope ('': all mail).
SELECT address, scope, reason, source, delivery_id, created_at, expires_at FROM email_suppressions
ORDER BY created_at DESC, address, scope;

-- name: events_of
-- The delivery events of the row with dedupe key $1, oldest first.
SELECT e.provider, e.provider_event_id, e.kind, e.bounce_class, e.recipient, e.occurred_at, e.received_at,
       e.detail::text AS detail
FROM email_delivery_events e JOIN email_deliveries d ON d.id = e.delivery_id
WHERE d.dedupe_key = $1
ORDER BY coalesce(e.occurred_at, e.received_at), e.id;

-- name: delivery_trace
-- The dedupe key and traceparent of row $1 (docs/tracing.md: the receiver's span of an event recorded for it, only while tracing is on).
SELECT dedupe_key, traceparent FROM email_deliveries WHERE id = $1;

-- name: record_refusals
-- Our own permanent RCPT refusals about the mailbox (5.1.1 and the like: rows $1, attempts $2, recipients $3 in normal form $4, at $5, replies $6) as hard bounces: an event each (once), the row's delivery_event, and, when $7, the recipient suppressed.
WITH refusal AS (
    SELECT * FROM unnest($1::bigint[], $2::integer[], $3::text[], $4::text[], $5::timestamptz[], $6::text[])
        AS r(delivery_id, attempt, recipient, address, at, reply)
), event AS (
    INSERT INTO email_delivery_events
        (delivery_id, provider, provider_event_id, kind, bounce_class, recipient, occurred_at, detail)
    SELECT delivery_id, 'smtp', 'rcpt:' || delivery_id || ':' || attempt || ':' || address, 'bounced', 'hard',
           recipient, at, jsonb_build_object('reply', reply, 'source', 'RCPT TO refusal')
    FROM refusal
    ON CONFLICT (provider, provider_event_id) DO NOTHING
    RETURNING delivery_id, occurred_at
), latest AS (
    UPDATE email_deliveries d SET delivery_event = 'bounced', delivery_event_at = e.at
    FROM (SELECT delivery_id, max(occurred_at) AS at FROM event GROUP BY delivery_id) e
    WHERE d.id = ANY ($1::bigint[]) AND d.id = e.delivery_id
      AND (d.delivery_event_at IS NULL OR d.delivery_event_at <= e.at)
)
INSERT INTO email_suppressions (address, reason, source, delivery_id)
SELECT DISTINCT ON (address) address, 'hard_bounce', 'smtp', delivery_id FROM refusal WHERE $7
ON CONFLICT (address, scope) DO NOTHING;

-- name: take_capacity
-- One grant of a transport's shared limits (sql/0011_shared_limits.sql, outbox_mailer/daemon/quotas.py): $1 transport, $2 RATE_PER_SECOND (null: none), $3 BURST, $4 requests wanted, $5 horizon in seconds, $6 DAILY_LIMIT (null: none), $7 DAILY_WINDOW_SECONDS, $8 recipients wanted, $9 recipients given back, $10 the slot they were granted in, $11 recovery seconds of a throttled rate.
SELECT * FROM email_take_capacity($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11);

-- name: throttle_transport
-- A throttling reply: lower the transport's shared rate ($1 transport, $2 factor, $3 lowest share, $4 hold-off seconds, $5 recovery seconds, $6 cooldown seconds).
SELECT * FROM email_throttle_transport($1, $2, $3, $4, $5, $6);

-- name: transport_use
-- Each limited transport's state for `stats` and the metrics: the rate share in force ($1 recovery seconds), throttles, and the requests and recipients granted within each transport's DAILY_WINDOW_SECONDS ($2, a jsonb object: transport -> seconds; 86400 when absent).
SELECT l.transport,
       least(1, l.rate_share + extract(epoch FROM clock_timestamp() - l.share_at) / $1) AS rate_share,
       l.throttles, l.throttled_at,
       coalesce(sum(u.requests), 0)::bigint AS requests,
       coalesce(sum(u.recipients), 0)::bigint AS recipients
FROM email_transport_limits l
LEFT JOIN email_transport_usage u
       ON u.transport = l.transport
      AND u.slot_start > clock_timestamp() - make_interval(secs => coalesce(($2::jsonb ->> l.transport)::float8, 86400)
                                                                   + u.slot_seconds)
GROUP BY l.transport, l.rate_share, l.share_at, l.throttles, l.throttled_at
ORDER BY l.transport;

-- name: transport_pauses
-- For each transport of $1 (a daemon's, about once a second): its operator pause in force (null columns: none; paused_until null: until resumed; seconds_left its remaining seconds) and when it was last resumed (null: never).
SELECT t.name AS transport, p.paused_by, p.reason, p.paused_until,
       extract(epoch FROM p.paused_until - now())::float8 AS seconds_left,
       (SELECT max(a.at) FROM email_operator_actions a
        WHERE a.transport = t.name AND a.action = 'resume') AS resumed_at
FROM unnest($1::text[]) AS t(name)
LEFT JOIN email_transport_pauses p
       ON p.transport = t.name AND p.source = 'operator' AND (p.paused_until IS NULL OR p.paused_until > now());

-- name: publish_breaker_pause
-- A daemon's circuit breaker paused transport $1 for $4 seconds (paused_by $2, reason $3): published unless a longer breaker pause is; returns the database's time of it (a later resume lifts it).
WITH published AS (
    INSERT INTO email_transport_pauses AS p (transport, source, paused_by, reason, paused_until)
    VALUES ($1, 'breaker', $2, left($3, 1000), now() + make_interval(secs => $4))
    ON CONFLICT ON CONSTRAINT email_transport_pauses_pkey DO UPDATE
        SET paused_by = EXCLUDED.paused_by, reason = EXCLUDED.reason, paused_at = now(),
            paused_until = EXCLUDED.paused_until
        WHERE p.paused_until < EXCLUDED.paused_until
    RETURNING 1
)
SELECT now() AS at;

-- name: pause_transport
-- Pause transport $1 as actor $2 for reason $3 until $4 (null: until resumed), recorded as an operator action; returns the pause.
SELECT * FROM email_transport_pause($1, $2, $3, $4);

-- name: resume_transport
-- Lift every pause of transport $1 as actor $2, recorded as an operator action when one was in force; returns the sources lifted.
SELECT email_transport_resume($1, $2);

-- name: paused_transports
-- The pauses in force, by transport and source (operator first): `outbox-mailer pause` with no transport, the console's overview.
SELECT transport, source, paused_by, reason, paused_at, paused_until FROM email_transport_pauses
WHERE paused_until IS NULL OR paused_until > now() ORDER BY transport, source DESC;

-- name: template_version
-- One immutable version of a stored template (schema 27) by name $1, locale $2 and version $3: what a row that names it renders; the daemon caches it (store/templates.py).
SELECT name, locale, version, subject, text_body, html_body
FROM email_templates WHERE name = $1 AND locale = $2 AND version = $3;

-- name: resolve_template
-- The locale and version a row naming template $1 with locale $2 (null: the default) and version $3 (null: the latest) renders: what the INSERT would record.
SELECT locale, version FROM email_templates_resolve($1, $2, $3);

-- name: add_template
-- Add a version of template $1 in locale $2: the next version of that name and locale (the first is 1), with subject $3, bodies $4 and $5, added by $6. Concurrent adds of one name and locale: one wins, the other fails on the unique (name, locale, version).
INSERT INTO email_templates (name, locale, version, subject, text_body, html_body, created_by)
SELECT $1, $2, coalesce(max(version), 0) + 1, $3, $4, $5, $6
FROM email_templates WHERE name = $1 AND locale = $2
RETURNING name, locale, version, created_at, created_by;

-- name: list_templates
-- Every template and locale: its latest version, how many it has, when the latest was added and by whom, and whether the locale is the template's default (that of its first version).
SELECT t.name, t.locale, t.version AS latest_version, n.versions, t.created_at, t.created_by,
       t.locale = (SELECT f.locale FROM email_templates f WHERE f.name = t.name ORDER BY f.id LIMIT 1) AS is_default
FROM email_templates t
JOIN (SELECT name, locale, max(version) AS latest, count(*) AS versions FROM email_templates GROUP BY name, locale) n
  ON n.name = t.name AND n.locale = t.locale AND n.latest = t.version
ORDER BY t.name, t.locale;
