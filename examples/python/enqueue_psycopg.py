"""Enqueue one email with psycopg 3 inside the application's transaction, then read its status.

    DATABASE_URL=postgresql://... python enqueue_psycopg.py KEY RECIPIENT [--rollback]
"""

import json
import os
import sys

import psycopg

INSERT = """
    INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body)
    VALUES (%s, %s, %s, %s)
    ON CONFLICT (dedupe_key) DO NOTHING
"""
STATUS = "SELECT status FROM email_deliveries WHERE dedupe_key = %s"


def main() -> None:
    key, recipient = sys.argv[1], sys.argv[2]
    rollback = sys.argv[3:] == ["--rollback"]
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        with conn.transaction():  # COMMIT at the end of the block, ROLLBACK on an exception
            # ... the application's own writes go here, in the same transaction ...
            conn.execute(INSERT, (key, [recipient], "Your order", "Thank you for your order."))
            if rollback:
                raise psycopg.Rollback  # the row never existed: nothing is ever sent
        row = conn.execute(STATUS, (key,)).fetchone()
    print(json.dumps({"dedupe_key": key, "status": row[0] if row else None}))


if __name__ == "__main__":
    main()
