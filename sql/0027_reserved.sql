-- outbox-mailer schema, version 27: reserved for the templates' migration (issue #34), written on another
-- branch at the same time as version 28. It changes nothing; the templates' 0027 replaces this file.
SELECT 1;
