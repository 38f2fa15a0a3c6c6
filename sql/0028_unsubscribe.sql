-- outbox-mailer schema, version 28: one-click unsubscribe and suppression scopes (docs/unsubscribe.md).
--
-- Its migration lands from its own branch and replaces this file when the branches are merged; this one
-- only keeps the versions without a gap so that schema 29 (provider templates) applies on its own. It
-- changes nothing.
SELECT 1;
