"""Enqueue one email with asyncpg inside the application's transaction, then read its status.

    DATABASE_URL=postgresql://... python enqueue_asyncpg.py KEY RECIPIENT [--rollback | --template NAME]

With --template, the row names a stored template and gives its data instead of a subject and a body;
a template that does not exist is refused at the INSERT (asyncpg.CheckViolationError).
"""

import asyncio
import contextlib
import json
import os
import sys

import asyncpg

INSERT = """
    INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body)
    VALUES ($1, $2, $3, $4)
    ON CONFLICT (dedupe_key) DO NOTHING
"""
INSERT_TEMPLATE = """
    INSERT INTO email_deliveries (dedupe_key, to_addresses, template, template_data)
    VALUES ($1, $2, $3, $4::jsonb)
    ON CONFLICT (dedupe_key) DO NOTHING
"""
STATUS = "SELECT status FROM email_deliveries WHERE dedupe_key = $1"


class Rollback(Exception):
    """Raised inside the transaction block to roll it back on purpose."""


async def main() -> None:
    key, recipient, *flags = sys.argv[1:]
    rollback = flags == ["--rollback"]
    template = flags[1] if flags[:1] == ["--template"] else None
    conn = await asyncpg.connect(os.environ["DATABASE_URL"])
    try:
        with contextlib.suppress(Rollback):
            async with conn.transaction():  # COMMIT at the end of the block, ROLLBACK on an exception
                # ... the application's own writes go here, in the same transaction ...
                if template:  # asyncpg takes jsonb as JSON text
                    await conn.execute(INSERT_TEMPLATE, key, [recipient], template, json.dumps({"order": key}))
                else:
                    await conn.execute(INSERT, key, [recipient], "Your order", "Thank you for your order.")
                if rollback:
                    raise Rollback  # the row never existed: nothing is ever sent
        status = await conn.fetchval(STATUS, key)
    finally:
        await conn.close()
    print(json.dumps({"dedupe_key": key, "status": status}))


if __name__ == "__main__":
    asyncio.run(main())
