"""Enqueue one email with asyncpg inside the application's transaction, then read its status.

    DATABASE_URL=postgresql://... python enqueue_asyncpg.py KEY RECIPIENT [--rollback]
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
STATUS = "SELECT status FROM email_deliveries WHERE dedupe_key = $1"


class Rollback(Exception):
    """Raised inside the transaction block to roll it back on purpose."""


async def main() -> None:
    key, recipient = sys.argv[1], sys.argv[2]
    rollback = sys.argv[3:] == ["--rollback"]
    conn = await asyncpg.connect(os.environ["DATABASE_URL"])
    try:
        with contextlib.suppress(Rollback):
            async with conn.transaction():  # COMMIT at the end of the block, ROLLBACK on an exception
                # ... the application's own writes go here, in the same transaction ...
                await conn.execute(INSERT, key, [recipient], "Your order", "Thank you for your order.")
                if rollback:
                    raise Rollback  # the row never existed: nothing is ever sent
        status = await conn.fetchval(STATUS, key)
    finally:
        await conn.close()
    print(json.dumps({"dedupe_key": key, "status": status}))


if __name__ == "__main__":
    asyncio.run(main())
