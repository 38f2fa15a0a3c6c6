-- outbox-mailer schema, version 16: the daemon's own rows beside email_deliveries cost no foreign-key checks.
--
-- Two tables follow the rows of email_deliveries: email_queue (a row per email still to settle,
-- inserted by the application's INSERT through its trigger) and email_delivery_attempts (a row per
-- attempt, inserted by every outcome the daemon records: record_outcomes in queries.sql). Both had
-- a foreign key to email_deliveries, which PostgreSQL checks with one statement per inserted row
-- (SELECT ... FOR KEY SHARE) that locks the delivery row, and writes that lock to the WAL: the row
-- the application has just inserted, or the row record_outcomes has just updated. Neither insert
-- can name a missing row: the queue's are made from the rows being inserted or updated, and
-- record_outcomes inserts an attempt only for rows that exist as the statement starts, holding the
-- row lock of every row whose claim it settles, so a DELETE of such a row waits for its COMMIT.
-- What the keys still did, deleting a row's queue entry and attempts with it, is done by the
-- triggers below, once per statement (prune deletes thousands of rows at a time).
-- One case is left open: an attempt of a claim lost to another process (a rescuer settled the row
-- first) is written without that lock, so a DELETE of the row at that very moment can leave the
-- attempt behind: history of a row that no longer exists, never an email lost or sent.
--
-- The attempts also had a primary key on the identity column id beside the unique index on
-- (delivery_id, attempt, started_at), which identifies an attempt and serves every look-up of
-- attempts (by row, newest first; ON CONFLICT of a write retried after a lost COMMIT reply). That
-- index becomes the primary key; id stays, unique by construction, without an index of its own.
--
-- Measured with claim_due + record_outcomes alone, 100 rows a statement: 1,273 -> 1,151 bytes of
-- WAL per email (one B-tree entry and one row lock less), about a fifth less of record_outcomes'
-- PostgreSQL CPU; the application's INSERT loses its lock per row too.

ALTER TABLE email_delivery_attempts DROP CONSTRAINT email_delivery_attempts_delivery_id_fkey;
ALTER TABLE email_queue DROP CONSTRAINT email_queue_delivery_id_fkey;

ALTER TABLE email_delivery_attempts DROP CONSTRAINT email_delivery_attempts_pkey;
ALTER TABLE email_delivery_attempts
    ADD CONSTRAINT email_delivery_attempts_pkey PRIMARY KEY USING INDEX email_delivery_attempts_once_idx;

-- A row's queue entry and attempts go with it (as ON DELETE CASCADE did), whoever deletes it:
-- SECURITY DEFINER, as the application's role needs no privilege on either table.
CREATE FUNCTION email_deliveries_drop_followers() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
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

CREATE TRIGGER email_deliveries_drop_followers
    AFTER DELETE ON email_deliveries
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION email_deliveries_drop_followers();

CREATE TRIGGER email_deliveries_truncate_followers
    AFTER TRUNCATE ON email_deliveries
    FOR EACH STATEMENT EXECUTE FUNCTION email_deliveries_drop_followers();

COMMENT ON COLUMN email_delivery_attempts.id IS
    'outbox-mailer: an identity, unique by construction; the primary key is (delivery_id, attempt, started_at) since schema 16';
