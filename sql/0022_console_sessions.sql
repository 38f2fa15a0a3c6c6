-- outbox-mailer schema, version 22: the operator console's sessions, in the database.
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
