-- outbox-mailer schema, version 9: what happened after the first server accepted an email.
--
-- 1. email_deliveries gains
--    - message_id: the Message-ID the daemon composed (<hex@domain>, an HMAC of the dedupe key),
--      written with the row's first attempt, so anyone can match replies and bounces to the row;
--    - delivery_event and delivery_event_at: the latest of delivered, delayed, bounced,
--      complained that a provider or a bounce reported (null while nothing is known);
--    - ignore_suppressions: application-owned, for mail that must go out to a suppressed
--      address regardless (a security notice).
--    None is indexed: the hot path writes message_id, and the hot-path rule keeps every index
--    of email_deliveries off columns it changes. The new columns follow status at the end of
--    the row, so an update's WAL record still leaves the bodies out.
-- 2. email_delivery_attempts carries message_id (on the attempt that first wrote it) and
--    provider_message_id (the provider's id of the sent email, or the relay's queue id):
--    events are matched to rows through these rows, which the hot path only inserts.
-- 3. email_delivery_events: one row per provider event, unique on (provider, provider_event_id),
--    so a provider retrying a webhook writes nothing twice.
-- 4. email_suppressions: one row per address (normalised by the daemon: lower case, Unicode
--    normal form C, an internationalised domain in its Unicode form), reason hard_bounce |
--    complaint | unsubscribe | manual.
-- 5. email_webhook_tokens: Mailgun tokens seen, so a token reused for another body is refused.

ALTER TABLE email_deliveries
    ADD COLUMN message_id          text,
    ADD COLUMN delivery_event      text,
    ADD COLUMN delivery_event_at   timestamptz,
    ADD COLUMN ignore_suppressions boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT email_deliveries_delivery_event_valid
        CHECK (delivery_event IN ('delivered', 'delayed', 'bounced', 'complained'));

COMMENT ON COLUMN email_deliveries.message_id IS
    'The Message-ID header the daemon sent, written with the first attempt';
COMMENT ON COLUMN email_deliveries.delivery_event IS
    'Latest delivery event reported for the row (delivered, delayed, bounced, complained); null while unknown';
COMMENT ON COLUMN email_deliveries.ignore_suppressions IS
    'Application-owned: send even to suppressed addresses';

ALTER TABLE email_delivery_attempts
    ADD COLUMN message_id          text,
    ADD COLUMN provider_message_id text;

CREATE INDEX email_delivery_attempts_provider_message_idx ON email_delivery_attempts (provider_message_id)
    WHERE provider_message_id IS NOT NULL;
CREATE INDEX email_delivery_attempts_message_idx ON email_delivery_attempts (message_id)
    WHERE message_id IS NOT NULL;

CREATE TABLE email_delivery_events (
    id                bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id       bigint      REFERENCES email_deliveries (id) ON DELETE CASCADE,  -- null: matched no row
    provider          text        NOT NULL,
    provider_event_id text        NOT NULL,
    kind              text        NOT NULL,
    bounce_class      text,
    recipient         text,
    occurred_at       timestamptz,
    received_at       timestamptz NOT NULL DEFAULT now(),
    detail            jsonb       NOT NULL DEFAULT '{}',
    CONSTRAINT email_delivery_events_once UNIQUE (provider, provider_event_id),
    CONSTRAINT email_delivery_events_kind_valid
        CHECK (kind IN ('delivered', 'delayed', 'bounced', 'complained', 'rejected', 'unsubscribed')),
    CONSTRAINT email_delivery_events_bounce_class_valid
        CHECK (bounce_class IN ('hard', 'soft', 'undetermined') AND kind = 'bounced' OR bounce_class IS NULL)
);
CREATE INDEX email_delivery_events_delivery_idx ON email_delivery_events (delivery_id, occurred_at);
CREATE INDEX email_delivery_events_received_idx ON email_delivery_events (received_at);

CREATE TABLE email_suppressions (
    address     text        PRIMARY KEY,  -- normalised: lower case, NFC, IDN domain in its Unicode form
    reason      text        NOT NULL,
    source      text        NOT NULL,     -- "resend", "smtp", "operator", ...
    delivery_id bigint      REFERENCES email_deliveries (id) ON DELETE SET NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz,             -- null: never
    CONSTRAINT email_suppressions_reason_valid
        CHECK (reason IN ('hard_bounce', 'complaint', 'unsubscribe', 'manual')),
    CONSTRAINT email_suppressions_address_normalised
        CHECK (address = lower(address) AND address LIKE '%_@_%' AND address !~ '[<>[:space:]]')
);
-- prune deletes rows of email_deliveries: their suppressions' delivery_id is set null through this
CREATE INDEX email_suppressions_delivery_idx ON email_suppressions (delivery_id) WHERE delivery_id IS NOT NULL;

CREATE TABLE email_webhook_tokens (
    provider    text        NOT NULL,
    token       text        NOT NULL,
    body_sha256 bytea       NOT NULL,
    seen_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, token)
);

-- The form in which an address is suppressed, and compared: the address inside "Name <...>" if
-- there is one, in Unicode normal form C, lower case (outbox_mailer/suppression.py writes the same
-- form, with an internationalised domain in its Unicode form). Inlined into the claim.
CREATE FUNCTION outbox_mailer_suppression_address(address text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT lower(normalize(btrim(coalesce(substring(address FROM '<([^<>]*)>\s*$'), address)), NFC))
$$;
