"""The benchmark's own connection to the throwaway PostgreSQL: rows in, status out, and the meters.

Only the public contract is touched (`email_deliveries`: INSERT, and `status` read back), so the
benchmark measures any schema behind it. Meters: PostgreSQL's CPU from the postmaster's process
tree, this connection's own backend CPU (to take the benchmark's own statements out of a
figure), WAL via pg_current_wal_lsn(), and the checkpoint counters.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import common
from processes import log


class Db:
    def __init__(self, url: str) -> None:
        self.url = url
        self.conn = None
        self._backend_pid: int | None = None

    async def part_failed(self, results, what: str, exc: Exception) -> None:
        """One broken measurement becomes a note on the results, not the end of the run; a transaction
        it left open is rolled back so the next measurement starts clean."""
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        log(f"  {what}: failed: {first}")
        results.notes.append(f"{what} not measured: {first} (logs: --keep)")
        if self.conn.is_in_transaction():
            await self.conn.execute("ROLLBACK")

    async def open(self) -> None:
        import asyncpg

        deadline = time.monotonic() + 60
        while True:  # a fresh cluster may still say "the database system is starting up"
            try:
                self.conn = await asyncpg.connect(self.url)
                break
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)
        self._backend_pid = await self.conn.fetchval("SELECT pg_backend_pid()")

    async def migrate(self, *, pgqueuer: bool = True) -> None:
        from outbox_mailer.store import Store
        from outbox_mailer.store.migrations import load_migrations

        store = await Store.open(self.url)
        try:
            await store.migrate(load_migrations())
        finally:
            await store.close()
        if not pgqueuer:
            return
        from pgqueuer import Queries

        await Queries.from_asyncpg_connection(self.conn).install()
        await self.conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        await self.conn.execute("ALTER SYSTEM SET pg_stat_statements.track = 'none'")
        await self.conn.execute("SELECT pg_reload_conf()")

    # -- meters

    async def server_cpu_seconds(self) -> float:
        """CPU used so far by the whole PostgreSQL cluster (postmaster, backends, background processes)."""
        fields = Path(f"/proc/{self._backend_pid}/stat").read_text().rsplit(")", 1)[1].split()
        return common.cpu_seconds(int(fields[1]), tree=True)  # fields[1]: the parent, the postmaster

    def own_cpu_seconds(self) -> float:
        """CPU used so far by this connection's backend (the benchmark's own statements)."""
        return common.cpu_seconds(self._backend_pid)

    async def lsn(self) -> str:
        return await self.conn.fetchval("SELECT pg_current_wal_lsn()::text")

    async def wal_since(self, lsn: str) -> float:
        return float(await self.conn.fetchval("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::text::pg_lsn)", lsn))

    async def checkpoints(self) -> int:
        """Checkpoints so far, timed and requested (pg_stat_bgwriter; pg_stat_checkpointer from PostgreSQL 17)."""
        try:
            return int(await self.conn.fetchval("SELECT num_timed + num_requested FROM pg_stat_checkpointer"))
        except Exception:  # noqa: BLE001 - PostgreSQL 16 and older
            return int(await self.conn.fetchval("SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter"))

    # -- rows

    async def insert_rows(self, prefix: str, n: int, status: str = "pending", chunk: int = 100_000) -> None:
        for first in range(1, n + 1, chunk):
            await self.conn.execute(common.INSERT_ROWS_SQL, prefix, first, min(chunk, n - first + 1), status)

    async def truncate(self) -> None:
        # CASCADE: whatever the schema keeps beside the contract table (a queue of due rows) goes with it
        await self.conn.execute("TRUNCATE email_deliveries, email_delivery_attempts CASCADE")

    async def vacuum(self) -> None:
        await self.conn.execute("VACUUM (ANALYZE) email_deliveries")
        await self.conn.execute("VACUUM (ANALYZE) email_delivery_attempts")

    async def count(self, prefix: str, status: str) -> int:
        return int(await self.conn.fetchval(
            "SELECT count(*) FROM email_deliveries WHERE dedupe_key LIKE $1 || '%' AND status = $2", prefix, status))

    async def unfinished(self) -> int:
        return int(await self.conn.fetchval(
            "SELECT count(*) FROM email_deliveries WHERE status IN ('pending', 'sending')"))

    async def last_update(self, prefix: str) -> float:
        return float(await self.conn.fetchval(
            "SELECT extract(epoch FROM max(updated_at))::float8 FROM email_deliveries WHERE dedupe_key LIKE $1 || '%'",
            prefix))

    async def wait_drained(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while await self.unfinished():
            if time.monotonic() > deadline:
                raise RuntimeError(f"rows still unfinished after {timeout:g} s")
            await asyncio.sleep(0.1)

    async def wait_final(self, keys: list[str], timeout: float, interval: float = 0.2) -> None:
        """Until every row is final, looking up only ``keys`` (a few, by dedupe_key) until they are, then all
        of them once: a light poll, for windows whose PostgreSQL CPU is measured."""
        deadline = time.monotonic() + timeout
        probe = "SELECT count(*) FROM email_deliveries WHERE dedupe_key = ANY($1::text[]) AND status IN ('pending', 'sending')"
        while await self.conn.fetchval(probe, keys) or await self.unfinished():
            if time.monotonic() > deadline:
                raise RuntimeError(f"rows still unfinished after {timeout:g} s")
            await asyncio.sleep(interval)
