"""Enqueue one email with psycopg 3 inside the application's transaction, then read its status.

    DATABASE_URL=postgresql://... python enqueue_psycopg.py KEY RECIPIENT [--rollback | --template NAME]

With --template, the row names a stored template and gives its data instead of a subject and a body;
a template that does not exist is refused at the INSERT (psycopg.errors.CheckViolation).
"""

import json
import os
import sys

import psycopg
from psycopg.types.json import Jsonb

INSERT = """
    INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body)
    VALUES (%s, %s, %s, %s)
    ON CONFLICT (dedupe_key) DO NOTHING
"""
INSERT_TEMPLATE = """
    INSERT INTO email_deliveries (dedupe_key, to_addresses, template, template_data)
    VALUES (%s, %s, %s, %s)
    ON CONFLICT (dedupe_key) DO NOTHING
"""
STATUS = "SELECT status FROM email_deliveries WHERE dedupe_key = %s"


def main() -> None:
    key, recipient, *flags = sys.argv[1:]
    rollback = flags == ["--rollback"]
    template = flags[1] if flags[:1] == ["--template"] else None
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        with conn.transaction():  # COMMIT at the end of the block, ROLLBACK on an exception
            # ... the application's own writes go here, in the same transaction ...
            if template:  # Jsonb(...) sends the dict as jsonb
                conn.execute(INSERT_TEMPLATE, (key, [recipient], template, Jsonb({"order": key})))
            else:
                conn.execute(INSERT, (key, [recipient], "Your order", "Thank you for your order."))
            if rollback:
                raise psycopg.Rollback  # the row never existed: nothing is ever sent
        row = conn.execute(STATUS, (key,)).fetchone()
    print(json.dumps({"dedupe_key": key, "status": row[0] if row else None}))


if __name__ == "__main__":
    main()
