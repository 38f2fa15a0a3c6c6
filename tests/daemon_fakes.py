"""Fakes at the ports of the daemon's row path, for unit tests of the executor and the rescuer (no
sockets, no database): a clock, transports that answer scripted outcomes, and a recorder and a
ledger that keep what they receive. :func:`context` builds the :class:`DaemonContext` they share.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from outbox_mailer.clock import monotonic
from outbox_mailer.daemon.breaker import Breaker
from outbox_mailer.daemon.context import DaemonContext
from outbox_mailer.daemon.gate import TransportGate
from outbox_mailer.daemon.inflight import InFlight
from outbox_mailer.delivery import BatchOutcome, ComposedMessage, Delivery, Outcome, Transport
from outbox_mailer.errors import DatabaseError
from outbox_mailer.settings.config import Settings
from outbox_mailer.store import AttemptRecord, OutcomeWrite, Recipients
from tests.message_ids import claimed_message_id

NOW = datetime(2026, 3, 14, 15, 9, 26, tzinfo=UTC)
WORKER = "host:1"


def make_delivery(n: int, **overrides: Any) -> Delivery:
    key = f"k-{n}"
    fields: dict[str, Any] = dict(
        id=n, dedupe_key=key, claim_token=uuid.UUID(int=n), attempts=1, max_attempts=None,
        from_address="Shop <shop@example.com>", to_addresses=(f"{key}@example.com",), cc_addresses=(),
        bcc_addresses=(), reply_to=None, subject=f"about {key}", text_body="hello", html_body=None,
        headers={}, attachments=[], metadata={}, transport=None, priority=0, scheduled_at=NOW,
        expires_at=None, created_at=NOW, first_attempt_at=NOW - timedelta(minutes=5),
        message_id=claimed_message_id(key),
    )  # fmt: skip
    fields.update(overrides)
    return Delivery(**fields)


class Clock:
    def __init__(self, now: datetime = NOW) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@dataclass
class ScriptedTransport:
    """Answers each send with the next scripted outcome; keeps what it was asked to send."""

    name: str
    answers: list[Outcome] = field(default_factory=list)
    events: list[str] = field(default_factory=list)  # shared with the ledger: what happened, in order
    idempotency_window_seconds: float | None = 86_400.0
    max_parallel: int = 4
    send_timeout_seconds: float = 5.0
    sent: list[Delivery] = field(default_factory=list)

    async def send(self, message: ComposedMessage, delivery: Delivery) -> Outcome:
        self.events.append(f"send {delivery.dedupe_key} through {self.name}")
        self.sent.append(delivery)
        return self.answers.pop(0)

    async def check(self) -> str:
        return self.name

    async def aclose(self) -> None:
        return None


@dataclass
class ScriptedBatchTransport(ScriptedTransport):
    """Also answers each batch request with the next scripted list of member outcomes."""

    batch_answers: list[list[BatchOutcome]] = field(default_factory=list)
    batch_limit: int = 10
    requests: list[tuple[str, list[str]]] = field(default_factory=list)  # (key, member keys)

    def batchable(self, message: ComposedMessage, delivery: Delivery) -> bool:
        return True

    def batch_digest(self, messages: Sequence[ComposedMessage], deliveries: Sequence[Delivery],
                     key: str) -> str | None:
        # a provider's request carries the message's header fields and bodies, as m.data does (less its Date)
        request = [key, *(f"{d.dedupe_key} {d.to_addresses} {m.message_id} {_undated_digest(m.data)}"
                          for m, d in zip(messages, deliveries, strict=True))]
        return hashlib.sha256("\n".join(request).encode()).hexdigest()

    async def send_batch(self, messages: Sequence[ComposedMessage], deliveries: Sequence[Delivery],
                         key: str) -> list[BatchOutcome]:
        self.events.append(f"batch of {len(deliveries)} through {self.name}")
        self.requests.append((key, [d.dedupe_key for d in deliveries]))
        return self.batch_answers.pop(0)


class Recorder:
    """Keeps every write handed to it."""

    def __init__(self) -> None:
        self.writes: list[OutcomeWrite] = []

    def submit(self, write: OutcomeWrite) -> None:
        self.writes.append(write)

    async def record(self, batch: Sequence[OutcomeWrite]) -> None:
        self.writes.extend(batch)

    def of(self, delivery: Delivery) -> OutcomeWrite:
        [write] = [w for w in self.writes if w.delivery.id == delivery.id]
        return write


class Ledger:
    """Keeps the carriers and batches recorded; ``carrier_answer`` is what recording a carrier does."""

    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.carrier_answer: bool | DatabaseError = True
        self.batches: list[tuple[str, str, list[int], str | None]] = []  # transport, key, member ids, digest
        self.given_up: list[tuple[list[int], list[AttemptRecord]]] = []

    async def record_carrier(self, delivery: Delivery, transport: str) -> bool:
        if isinstance(self.carrier_answer, DatabaseError):
            raise self.carrier_answer
        self.events.append(f"carrier {delivery.dedupe_key} {transport}")
        return self.carrier_answer

    async def open_batch(self, transport: str, key: str, members: Sequence[Delivery],
                         recipients: Sequence[Recipients] | None = None, digest: str | None = None) -> int | None:
        self.batches.append((transport, key, [d.id for d in members], digest))
        return len(self.batches)

    async def give_up(self, members: Sequence[Delivery],
                      attempts: Sequence[tuple[Delivery, AttemptRecord]] = ()) -> None:
        self.given_up.append(([d.id for d in members], [a for _, a in attempts]))


@dataclass
class Bundle:
    ctx: DaemonContext
    clock: Clock
    recorder: Recorder
    ledger: Ledger
    smtp: ScriptedTransport
    api: ScriptedBatchTransport
    events: list[str]

    def claim(self, *deliveries: Delivery) -> None:
        """Hold the rows in flight as the claim loop does, claimed just now."""
        self.ctx.inflight.hold(deliveries, monotonic())

    def pause(self, name: str) -> None:
        self.ctx.gates[name].breaker.pause(monotonic(), 60.0)


def _undated_digest(data: bytes) -> str:
    return hashlib.sha256(re.sub(rb"(?m)^Date: [^\r]*\r\n", b"", data)).hexdigest()


def context(in_doubt: str = "resend", **more: Any) -> Bundle:
    """A context with two transports: ``smtp`` (the default, falling back to ``api``) and ``api``
    (a provider with a batch endpoint); ``more``: other settings."""
    settings = Settings(database_url="postgresql://u@127.0.0.1:1/db", smtp={"fallback": "api"},
                        transports={"api": {"kind": "resend", "api_key": "k"}}, in_doubt=in_doubt, **more)
    events: list[str] = []
    smtp, api = ScriptedTransport("smtp", events=events), ScriptedBatchTransport("api", events=events)
    transports: dict[str, Transport] = {"smtp": smtp, "api": api}
    gates = {name: TransportGate(name, Breaker(1.0, 30.0)) for name in transports}
    clock, recorder, ledger = Clock(), Recorder(), Ledger(events)
    ctx = DaemonContext(settings, transports, gates, InFlight(10, 300.0), recorder, worker=WORKER,
                        default_transport="smtp", ledger=ledger, clock=clock)
    return Bundle(ctx, clock, recorder, ledger, smtp, api, events)
