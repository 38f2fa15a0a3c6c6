"""Statements per email by kind, from pg_stat_statements: how many of each named query a window ran.

The run loads pg_stat_statements with tracking off; ``Counting`` turns it on (``track = 'top'``) for
one window and reads every statement the window ran, named after its block of
``outbox_mailer/store/queries.sql`` (the texts compared with their whitespace folded), the benchmark's
own look-ups left out. Tracking costs PostgreSQL a little per statement, so a figure measured while
counting says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

READ = """
SELECT query, calls, rows FROM pg_stat_statements
WHERE query NOT LIKE '%pg_stat_statements%' AND query NOT LIKE '%pg_reload_conf%'
"""

BENCH_OWN = ("dedupe_key = ANY($1::text[]) AND status IN", "FROM email_deliveries WHERE status IN ('pending', 'sending')",
             "FROM email_deliveries WHERE dedupe_key LIKE", "INSERT INTO email_deliveries (dedupe_key, to_addresses",
             "ALTER SYSTEM", "VACUUM", "CHECKPOINT", "pg_current_wal", "pg_backend_pid", "pg_stat_bgwriter", "pg_stat_checkpointer")


COMMENT = re.compile(r"--[^\n]*")
LITERAL = re.compile(r"(?i:\b(?:null|true|false)\b)|'(?:[^']|'')*'|\$\d+|-?\b\d+(?:\.\d+)?\b")


def _folded(text: str) -> str:
    """Comments dropped, whitespace folded and every constant and parameter made ``?``
    (pg_stat_statements shows constants as parameters)."""
    return LITERAL.sub("?", " ".join(COMMENT.sub("", text).split()).rstrip(";"))


def _names() -> dict[str, str]:
    from outbox_mailer.store.queries import QUERIES

    return {_folded(q.sql): name for name, q in QUERIES.items()}


@dataclass(frozen=True)
class Kind:
    name: str  # the query block's name, or "other: <the statement's start>"
    calls: int
    rows: int


class Counting:
    """``async with Counting(db): ...`` tracks the statements run inside; then :meth:`kinds` reads them."""

    def __init__(self, db) -> None:
        self._db = db

    async def __aenter__(self) -> Counting:
        await self._set("top")
        await self._db.conn.execute("SELECT pg_stat_statements_reset()")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._set("none")

    async def _set(self, track: str) -> None:
        await self._db.conn.execute(f"ALTER SYSTEM SET pg_stat_statements.track = '{track}'")
        await self._db.conn.execute("SELECT pg_reload_conf()")

    async def kinds(self) -> list[Kind]:
        names = _names()
        found: dict[str, list[int]] = {}
        for r in await self._db.conn.fetch(READ):
            text = _folded(r["query"])
            if any(_folded(own) in text for own in BENCH_OWN):
                continue
            name = names.get(text) or "other: " + " ".join(r["query"].split())[:60]
            entry = found.setdefault(name, [0, 0])
            entry[0] += r["calls"]
            entry[1] += r["rows"]
        return sorted((Kind(n, c, rw) for n, (c, rw) in found.items()), key=lambda k: -k.calls)


def per_email(kinds: list[Kind], emails: int) -> dict[str, float]:
    """Calls per email of the claim, of the outcome write and of everything else, and the first two's
    rows per call."""
    by = {k.name: k for k in kinds}
    claim, write = by.get("claim_due"), by.get("record_outcomes")
    others = sum(k.calls for k in kinds if k.name not in ("claim_due", "record_outcomes"))
    return {
        "claims_per_email": (claim.calls if claim else 0) / emails,
        "writes_per_email": (write.calls if write else 0) / emails,
        "others_per_email": others / emails,
        "rows_per_claim": claim.rows / claim.calls if claim and claim.calls else 0.0,
        "rows_per_write": write.rows / write.calls if write and write.calls else 0.0,
    }


def describe(kinds: list[Kind], emails: int) -> str:
    """One line: the calls per email (and rows per call) of every kind run at least once per 200 emails,
    then how many calls the rest made."""
    shown = [k for k in kinds if k.calls * 200 >= emails]
    rest = sum(k.calls for k in kinds if k not in shown)
    return "; ".join([*(f"{k.name} {k.calls / emails:.3f}/email ({k.rows / k.calls if k.calls else 0:.1f} rows each)"
                        for k in shown), f"{rest} calls of other statements"])
