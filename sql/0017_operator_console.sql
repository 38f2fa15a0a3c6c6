-- outbox-mailer schema, version 17: the operator console's users and the record of what operators did.
--
-- email_console_users: who may sign in to `outbox-mailer console`, managed with
-- `outbox-mailer console-user add|remove|list`. password_hash is an Argon2id hash in its PHC string
-- form ($argon2id$v=19$m=...,t=...,p=...$salt$hash), made and checked by the console, never by SQL.
--
-- email_operator_actions: one row per thing an operator changed from the console (a retry, cancel or
-- resolve of one row, each row of a bulk retry or cancel, a suppression added or removed), written in
-- the transaction that changes it: who (actor), what (action), which dedupe key or address, when, and
-- the action's detail (the filter and count of a bulk action, the new status of a resolve).
--
-- Neither table is touched by the hot path: no index of email_deliveries changes here.

CREATE TABLE email_console_users (
    name          text        PRIMARY KEY,
    role          text        NOT NULL,
    password_hash text        NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT email_console_users_name_valid
        CHECK (char_length(name) BETWEEN 1 AND 64 AND name !~ '[[:cntrl:][:space:]]'),
    CONSTRAINT email_console_users_role_valid CHECK (role IN ('viewer', 'operator')),
    CONSTRAINT email_console_users_hash_valid CHECK (password_hash LIKE '$argon2%')
);

CREATE TABLE email_operator_actions (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    actor      text        NOT NULL,
    action     text        NOT NULL,
    dedupe_key text,
    address    text,
    at         timestamptz NOT NULL DEFAULT now(),
    detail     jsonb       NOT NULL DEFAULT '{}',
    CONSTRAINT email_operator_actions_action_valid
        CHECK (action IN ('retry', 'cancel', 'resolve', 'suppress', 'unsuppress')),
    CONSTRAINT email_operator_actions_names_one
        CHECK ((dedupe_key IS NULL) <> (address IS NULL))
);

-- An email's page lists what operators did to it; the log reads newest first.
CREATE INDEX email_operator_actions_key_idx ON email_operator_actions (dedupe_key, at) WHERE dedupe_key IS NOT NULL;
CREATE INDEX email_operator_actions_at_idx ON email_operator_actions (at);
