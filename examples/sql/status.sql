-- Read the email's status by dedupe key and print it as one JSON line (enqueue.sql and
-- enqueue_template.sql include this file with \ir).
\pset tuples_only on
\pset format unaligned
SELECT json_build_object('dedupe_key', :'key',
                         'status', (SELECT status FROM email_deliveries WHERE dedupe_key = :'key'));
