"""Where the hot statements' PostgreSQL CPU goes: each part taken away in turn, in a scratch database.

    .venv/bin/python bench/statement_parts.py [ROWS [BATCH [ROUNDS [VARIANT ...]]]]

One throwaway cluster; per round, for each variant in turn (the order rotates from round to round):
two fresh databases copied from a migrated template, one as migrated (``base``) and one with the
variant's changes (a dropped CHECK constraint or trigger, a part of ``claim_due`` or
``record_outcomes`` replaced by a constant, a session setting), ROWS (3,000) pending rows in each,
then the loop of ``statement_cost.py`` (claim BATCH (1) rows, record them sent) through the real
:class:`ClaimSession` on each, in lockstep: a statement of one, then the same of the other, so that
the machine's drift hits both alike. Prints, per variant, base minus variant in CPU per row (what
the part costs) for the claim, the outcome write and both: the median and range over ROUNDS (3).
The variant ``nothing`` changes nothing: the method's own spread. Nothing here changes the schema
of a real database.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import asyncpg

from outbox_mailer.decide import RetryPolicy, decide
from outbox_mailer.delivery import Outcome
from outbox_mailer.devtools.pgcluster import TemporaryPostgres
from outbox_mailer.store import AttemptRecord, ClaimSession, OutcomeWrite, Store
from outbox_mailer.store import queries as named
from outbox_mailer.store.migrations import load_migrations

INSERT = """
INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, html_body)
SELECT 'k' || g, ARRAY['user' || g || '@example.com'], 'Subject ' || g, repeat('text body ', 80),
       '<p>' || repeat('html body ', 80) || '</p>'
FROM generate_series(1, $1) g
"""
# the CHECK constraints of email_deliveries before schema 26 (a part not there costs nothing: IF EXISTS)
CHECKS = ("attempts_valid", "claimed_iff_sending", "delivery_event_valid", "scheduled_at_range", "sent_iff_sent_at",
          "status_valid", "updated_at_range")


@dataclass(frozen=True)
class Variant:
    name: str
    setup: Sequence[str] = ()  # run on the scratch database before the rows go in
    claim: Sequence[tuple[str, str]] = ()  # (text, replacement) in claim_due
    record: Sequence[tuple[str, str]] = ()  # (text, replacement) in record_outcomes
    session: Sequence[str] = ()  # run on the claim session after it opened
    results: list[tuple[float, float]] = field(default_factory=list)  # (claim, record): base minus variant, us per row, per round


def _message_id_expression() -> str:
    """The first_message_id fragment as it stands in claim_due."""
    return "CASE WHEN d.first_attempt_at IS NULL OR d.message_id IS NULL THEN" + named.QUERIES[
        "claim_due"].sql.split("CASE WHEN d.first_attempt_at IS NULL OR d.message_id IS NULL THEN", 2)[1].split(
        "ELSE d.message_id END", 1)[0] + "ELSE d.message_id END"


MESSAGE_ID_HMAC = "sha256(mid.outer_pad || sha256(mid.inner_pad || convert_to(d.dedupe_key, 'UTF8')))"
VARIANTS: dict[str, Callable[[], Variant]] = {
    "base": lambda: Variant("base"),
    "nothing": lambda: Variant("nothing"),  # base against itself: the measurement's own bias and spread
    "no_checks": lambda: Variant("no_checks", setup=[
        f"ALTER TABLE email_deliveries DROP CONSTRAINT IF EXISTS email_deliveries_{c}" for c in CHECKS]),
    **{f"no_check_{c}": (lambda c=c: Variant(f"no_check_{c}", setup=[
        f"ALTER TABLE email_deliveries DROP CONSTRAINT IF EXISTS email_deliveries_{c}"])) for c in CHECKS},
    "no_row_triggers": lambda: Variant("no_row_triggers", setup=[
        "DROP TRIGGER IF EXISTS email_deliveries_notify_requeue ON email_deliveries",  # (before schema 26)
        "DROP TRIGGER email_deliveries_sync_queue ON email_deliveries"]),
    "no_sync_trigger": lambda: Variant("no_sync_trigger", setup=[
        "DROP TRIGGER email_deliveries_sync_queue ON email_deliveries"]),
    "no_hmac": lambda: Variant("no_hmac", claim=[(MESSAGE_ID_HMAC, "'\\x00'::bytea")]),
    "no_message_id": lambda: Variant("no_message_id", claim=[(_message_id_expression(), "d.message_id")]),
    "no_suppression_probe": lambda: Variant("no_suppression_probe", claim=[
        ("(SELECT EXISTS (SELECT 1 FROM email_suppressions))", "false")]),
    "no_advisory_locks": lambda: Variant("no_advisory_locks", claim=[
        ("pg_advisory_unlock(outbox_mailer_lock_key(k))", "true"),
        ("WHERE pg_try_advisory_lock(lock_key)", "WHERE lock_key IS NOT NULL")]),
    "no_fits": lambda: Variant("no_fits", claim=[
        ("(\n" + named.QUERIES["claim_due"].sql.split("CASE WHEN\n(\n", 1)[1].split(") <= lim.max_bytes", 1)[0]
         + ") <= lim.max_bytes", "true")]),
    "no_quoted_probes": lambda: Variant("no_quoted_probes", record=[(
        named.QUERIES["record_outcomes"].sql.split("AS due,", 1)[1].split("AS quoted", 1)[0], " false ")]),
    "no_attempt_row": lambda: Variant("no_attempt_row", record=[("AND a.outcome IS NOT NULL", "AND false")]),
    "no_queue_delete": lambda: Variant("no_queue_delete", record=[(
        "WHERE q.delivery_id = ANY (ARRAY(SELECT id FROM updated WHERE status <> 'pending'))", "WHERE false")]),
    "custom_plans": lambda: Variant("custom_plans", session=["SET plan_cache_mode = force_custom_plan"]),
    "auto_plans": lambda: Variant("auto_plans", session=["SET plan_cache_mode = auto"]),
}


def cpu_seconds(pid: int) -> float:
    """The process's time on a CPU, in nanoseconds' precision (/proc/PID/stat counts 10 ms ticks)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


def replaced(text: str, replacements: Sequence[tuple[str, str]]) -> str:
    """Every occurrence of each text replaced."""
    for old, new in replacements:
        if old not in text:
            raise SystemExit(f"not in the statement: {old[:80]!r}")
        text = text.replace(old, new)
    return text


class Side:
    """One scratch database and the claim session on it, with its variant's statements."""

    def __init__(self, variant: Variant, session: ClaimSession, pid: int) -> None:
        self.variant, self.session, self.pid = variant, session, pid
        self.statements = {n: named.QUERIES[n]._replace(sql=replaced(named.QUERIES[n].sql, getattr(variant, part)))
                           for n, part in (("claim_due", "claim"), ("record_outcomes", "record"))}
        self.claim_cpu = self.record_cpu = 0.0
        self.rows = 0

    @classmethod
    async def open(cls, url: str, variant: Variant, rows: int) -> Side:
        conn = await asyncpg.connect(url)
        for statement in variant.setup:
            await conn.execute(statement)
        await conn.execute(INSERT.replace("$1", str(rows)))
        await conn.execute("ANALYZE")
        await conn.close()
        session = await ClaimSession.open(url)
        for statement in variant.session:
            await session._conn.execute(statement)
        return cls(variant, session, await session._conn.fetchval("SELECT pg_backend_pid()"))

    async def step(self, batch: int) -> bool:
        """One claim and its outcome write; False when nothing was left to claim."""
        originals = {n: named.QUERIES[n] for n in self.statements}
        named.QUERIES.update(self.statements)
        try:
            before = cpu_seconds(self.pid)
            claimed = await self.session.claim_due(batch, "bench")
            self.claim_cpu += cpu_seconds(self.pid) - before
            if not claimed:
                return False
            now, sent = datetime.now(UTC), Outcome.sent("q")
            writes = [OutcomeWrite(d, decide(d, sent, now, RetryPolicy(), 0.5),
                                   AttemptRecord(d.attempts, now, now, sent.kind, 250, None, None, "smtp", "bench"))
                      for d in claimed]
            before = cpu_seconds(self.pid)
            await self.session.record_outcomes(writes)
            self.record_cpu += cpu_seconds(self.pid) - before
            self.rows += len(claimed)
            return True
        finally:
            named.QUERIES.update(originals)

    def per_row(self) -> tuple[float, float]:
        return self.claim_cpu / self.rows * 1e6, self.record_cpu / self.rows * 1e6


async def paired(admin: asyncpg.Connection, root: str, base: Variant, variant: Variant, rows: int,
                 batch: int) -> None:
    """Base and variant in lockstep, a statement of each in turn, so the machine's drift hits both alike."""
    sides = []
    for name, v in (("scratch_a", base), ("scratch_b", variant)):
        await admin.execute(f"CREATE DATABASE {name} TEMPLATE scratch_template")
        sides.append(await Side.open(f"{root}/{name}", v, rows))
    while all([await side.step(batch) for side in sides]):
        pass
    for side in sides:
        await side.session.close()
    for name in ("scratch_a", "scratch_b"):
        await admin.execute(f"DROP DATABASE {name}")
    (bc, br), (vc, vr) = (side.per_row() for side in sides)
    variant.results.append((bc - vc, br - vr))


async def main(rows: int, batch: int, rounds: int, names: list[str]) -> None:
    base, variants = VARIANTS["base"](), [VARIANTS[n]() for n in names]
    with TemporaryPostgres() as pg:
        root = pg.url.rsplit("/", 1)[0]
        admin = await asyncpg.connect(pg.url)
        await admin.execute("CREATE DATABASE scratch_template")
        store = await Store.open(f"{root}/scratch_template")
        await store.migrate(load_migrations())
        await store.close()
        for r in range(rounds):
            for i in range(len(variants)):
                await paired(admin, root, base, variants[(i + r) % len(variants)], rows, batch)
        await admin.close()
    print(f"rows={rows} batch={batch} rounds={rounds}: us of PostgreSQL CPU per row that the part costs "
          "(base minus variant, run in lockstep), median and range over the rounds")
    print("| part taken away | claim | outcome write | both |")
    print("|---|---|---|---|")
    for v in variants:
        claim, record, both = ([f(c, w) for c, w in v.results] for f in (
            lambda c, w: c, lambda c, w: w, lambda c, w: c + w))
        print(f"| {v.name} | " + " | ".join(
            f"{statistics.median(x):.0f} ({min(x):.0f} to {max(x):.0f})" for x in (claim, record, both)) + " |")


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(main(int(args[0]) if args else 3000, int(args[1]) if len(args) > 1 else 1,
                     int(args[2]) if len(args) > 2 else 3, args[3:] or [n for n in VARIANTS if n != "base"]))
