-- outbox-mailer schema, version 7: the advisory-lock key of a dedupe key, said once.
--
-- Every daemon (and any tool that wants to see which rows a daemon holds, e.g.
-- pg_locks joined on it) derives a row's session advisory lock from its dedupe
-- key with this function: 64 bits of hashtextextended over a namespaced text,
-- so other users of advisory locks in the same database do not collide with
-- ours. A hash collision between two keys can only make one wait for the other,
-- never let two daemons hold one key. IMMUTABLE and a plain SQL body, so
-- PostgreSQL inlines it: it costs what the expression cost.

CREATE FUNCTION outbox_mailer_lock_key(dedupe_key text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
RETURN hashtextextended('outbox-mailer:' || dedupe_key, 0);

COMMENT ON FUNCTION outbox_mailer_lock_key(text) IS
    'outbox-mailer: the session advisory-lock key a daemon holds while it sends the row with this dedupe key';
