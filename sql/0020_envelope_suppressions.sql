-- outbox-mailer schema, version 20: one form for a suppressed address, and events that came too early.
--
-- 1. A suppressed address is stored in the envelope's form (outbox_mailer/addresses.py,
--    mailbox_form): the address RCPT TO carries, its domain folded by IDNA/UTS #46 into lower-case
--    ASCII (zoe@ｅxample.com, zoe@example。com and zoe@example.com are one mailbox; zoë@exämple.com is
--    zoë@xn--exmple-cua.com), the ASCII letters of the local part in lower case. SQL cannot compute
--    that form (NFKC leaves U+3002 alone, lower() follows the locale), so the daemon computes it in
--    Python and compares the claimed rows' recipients after the claim, not in it.
--    Rows written before this schema may be in the older form (a Unicode domain, a full-width
--    letter); address_form says which: 1 for every row already here, 2 (the default) for rows
--    written from now on. `outbox-mailer migrate`, and every daemon at start, rewrite the rows of
--    form 1 in Python (a row whose new form is already suppressed is dropped: the address keeps its
--    first reason), so a schema applied with another migration tool is finished by the next start.
--    The function outbox_mailer_suppression_address stays for daemons of earlier versions between
--    this migration and their restart; nothing of this version calls it.
-- 2. An event that matched no row (it came before its row's outcome was written: a DSN or a fast
--    webhook while the row was still 'sending') keeps the provider's message id and the Message-ID
--    it quotes; the outcome's write looks for such events through two partial indexes on this table
--    (the hot-path rule: nothing new is indexed on email_deliveries) and matches them then.

ALTER TABLE email_suppressions ADD COLUMN address_form smallint NOT NULL DEFAULT 1;
ALTER TABLE email_suppressions ALTER COLUMN address_form SET DEFAULT 2;
CREATE INDEX email_suppressions_old_form_idx ON email_suppressions (address) WHERE address_form < 2;
COMMENT ON COLUMN email_suppressions.address_form IS
    '2: address in the envelope''s form (outbox_mailer/addresses.py); 1: written before schema 20, rewritten by migrate or the daemon''s start';

ALTER TABLE email_delivery_events
    ADD COLUMN quoted_provider_message_id text,
    ADD COLUMN quoted_message_id          text;
CREATE INDEX email_delivery_events_waiting_provider_idx ON email_delivery_events (quoted_provider_message_id)
    WHERE delivery_id IS NULL AND quoted_provider_message_id IS NOT NULL;
CREATE INDEX email_delivery_events_waiting_message_idx ON email_delivery_events (quoted_message_id)
    WHERE delivery_id IS NULL AND quoted_message_id IS NOT NULL;
COMMENT ON COLUMN email_delivery_events.quoted_message_id IS
    'The Message-ID an event quoted; kept so that an event that came before its row''s outcome is matched when the outcome is written';
