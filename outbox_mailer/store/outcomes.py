"""An outcome write, and the parameters of the statement that records it (``record_outcomes``).

The statement takes one array per column, every element one write's: :data:`OUTCOME_COLUMNS`
names each column once, with the element type the statement casts it to and how a write gives
its value, in the order of the statement's placeholders ($1 is the first). The statement's
``unnest(...) AS alias(...)`` lists use the same names; ``tests/unit/test_outcome_columns.py``
holds the two together, so a column added or moved cannot shift a position unseen.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..decide import Transition
from ..delivery import Delivery, OutcomeKind, RefusedRecipient, quick_init

RESCUER_LABEL = "rescuer "  # how the attempts table's worker column shows a rescue: "rescuer <worker>"


@quick_init
@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One attempt, as written to email_delivery_attempts."""

    attempt: int
    started_at: datetime
    finished_at: datetime
    outcome: OutcomeKind
    reply_code: int | None
    enhanced_code: str | None
    error: str | None
    transport: str
    worker: str
    refused: tuple[RefusedRecipient, ...] = ()  # every recipient not reached, kept whole (no clipping)
    message_id: str | None = None  # the Message-ID composed for it (None: nothing composed)
    reply: str | None = None  # the server's whole final reply (provider_message_id is the id in it)
    # recorded by a rescuer for a claim its holder left (started_at is then the claim's time, not a
    # send's start); the attempts table shows its worker as "rescuer <worker>"
    rescue: bool = False

    @property
    def worker_label(self) -> str:
        return RESCUER_LABEL + self.worker if self.rescue else self.worker


@quick_init
@dataclass(frozen=True, slots=True)
class OutcomeWrite:
    """A decided transition and its attempt (not written when the transition gives the claim back untried)."""

    delivery: Delivery
    transition: Transition
    attempt: AttemptRecord


@dataclass(frozen=True, slots=True)
class Column:
    """One parameter of record_outcomes: an array with an element per write."""

    name: str  # its name in the statement's unnest(...) AS alias(...) lists
    element: str  # the element type the statement casts the array to
    value: Callable[[OutcomeWrite], Any]


def _json_list(values: tuple[str, ...] | None) -> str | None:
    return json.dumps(values) if values is not None else None


def refused_json(refused: Sequence[RefusedRecipient]) -> str | None:
    if not refused:
        return None
    return json.dumps([{"address": r.address, "reply_code": r.reply_code, "message": r.message,
                        "unknown": r.unknown} for r in refused])


# Recipient lists travel as JSON text (null: none), one per row: asyncpg would take nested lists
# for a multi-dimensional array.
OUTCOME_COLUMNS: tuple[Column, ...] = (
    Column("delivery_id", "bigint", lambda w: w.delivery.id),
    Column("claim_token", "uuid", lambda w: w.delivery.claim_token),  # the fence
    Column("status", "text", lambda w: w.transition.status.value),
    Column("scheduled_at", "timestamptz", lambda w: w.transition.scheduled_at),
    Column("last_error", "text", lambda w: w.transition.last_error),
    Column("provider_message_id", "text", lambda w: w.transition.provider_message_id),
    Column("sent_at", "timestamptz", lambda w: w.transition.sent_at),
    Column("refund", "integer", lambda w: 1 if w.transition.refund_attempt else 0),
    Column("retry_recipients", "text", lambda w: _json_list(w.transition.retry_recipients)),
    Column("refused_recipients", "text", lambda w: _json_list(w.transition.refused_recipients or None)),
    Column("attempt", "integer", lambda w: w.attempt.attempt),
    Column("started_at", "timestamptz", lambda w: w.attempt.started_at),
    Column("finished_at", "timestamptz", lambda w: w.attempt.finished_at),
    # null: a claim given back untried, of which no attempt is written
    Column("outcome", "text", lambda w: None if w.transition.given_back else w.attempt.outcome.value),
    Column("reply_code", "smallint", lambda w: w.attempt.reply_code),
    Column("enhanced_code", "text", lambda w: w.attempt.enhanced_code),
    Column("error", "text", lambda w: w.attempt.error),
    Column("transport", "text", lambda w: w.attempt.transport),
    Column("worker", "text", lambda w: w.attempt.worker_label),
    Column("refused", "text", lambda w: refused_json(w.attempt.refused)),
    Column("message_id", "text", lambda w: w.attempt.message_id),  # the attempt's Message-ID
    Column("reply", "text", lambda w: w.attempt.reply),
)


def outcome_parameters(writes: Sequence[OutcomeWrite]) -> list[list[Any]]:
    """The parameters of record_outcomes, in the order of its placeholders: one array per column."""
    return [list(map(column.value, writes)) for column in OUTCOME_COLUMNS]  # map: no frame per value
