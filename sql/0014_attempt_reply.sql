-- The server's whole final reply on each attempt (issue 17, item 4). provider_message_id holds
-- the relay's queue id alone (Postfix "queued as ID", Exim "id=ID", Amazon SES "Ok ID"), which is
-- what its bounces and events name the message by; the reply it came from, with its codes and
-- text ("250 2.0.0 Ok: queued as 8AC6616249E"), stays here, also when it holds no id at all
-- ("250 Great success"). Null when there was no reply (a provider API, a lost connection).
-- A nullable column without a default: adding it rewrites nothing; attempts are only inserted,
-- and no index covers it (the hot-path rule).
ALTER TABLE email_delivery_attempts ADD COLUMN reply text;
COMMENT ON COLUMN email_delivery_attempts.reply IS
    'the server''s final reply, one line (SMTP: the answer to the message body); null: none';
