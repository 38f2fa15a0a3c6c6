"""The executor (daemon/executor.py) with fakes at its ports: a clock, scripted transports, a
recorder and a ledger that keep what they receive; no sockets, no database."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import anyio.lowlevel
import pytest

from outbox_mailer.clock import monotonic
from outbox_mailer.daemon.executor import Executor
from outbox_mailer.delivery import BatchOutcome, ComposedMessage, Delivery, Outcome, OutcomeKind, SendSingly, Status
from outbox_mailer.errors import DatabaseError
from outbox_mailer.providers.seam import batch_idempotency_key
from outbox_mailer.store import OutcomeWrite
from tests.daemon_fakes import NOW, WORKER, Bundle, ScriptedBatchTransport, context, make_delivery

pytestmark = pytest.mark.anyio


async def carried(b: Bundle, answer: Outcome | None, name: str | None = "smtp") -> OutcomeWrite:
    """Claim one row, script the answer of the transport ``name`` (None: routed now), carry it; its write."""
    row = make_delivery(1)
    b.claim(row)
    if answer is not None:
        (b.api if name == "api" else b.smtp).answers.append(answer)
    await Executor(b.ctx).carry(row, name=name)
    return b.recorder.of(row)


async def test_a_sent_outcome_is_recorded_as_sent_with_its_attempt() -> None:
    b = context()
    write = await carried(b, Outcome.sent("queue-id-1"))
    assert (write.transition.status, write.transition.provider_message_id, write.transition.sent_at) == (
        Status.SENT, "queue-id-1", NOW)
    assert (write.attempt.outcome, write.attempt.transport, write.attempt.worker, write.attempt.message_id) == (
        OutcomeKind.SENT, "smtp", WORKER, make_delivery(1).message_id)
    assert b.ctx.inflight.sending == 0, "the send's slot is free once its outcome is handed over"


async def test_a_transient_failure_is_scheduled_for_a_retry_and_charged() -> None:
    write = await carried(context(), Outcome.transient("451 4.3.0 try later", reply_code=451))
    assert write.transition.status is Status.PENDING and not write.transition.refund_attempt
    assert write.transition.scheduled_at is not None and write.transition.scheduled_at > NOW
    assert (write.attempt.outcome, write.attempt.reply_code, write.attempt.error) == (
        OutcomeKind.TRANSIENT, 451, "451 4.3.0 try later")


async def test_a_row_whose_own_transport_is_paused_goes_to_its_fallback_recording_the_carrier_before_the_send(
        ) -> None:
    b = context()
    b.pause("smtp")
    b.api.answers.append(Outcome.sent("re-1"))
    write = await carried(b, None, name=None)  # routed now: its own transport is paused
    assert b.events == ["carrier k-1 api", "send k-1 through api"], "recorded for a rescuer, then sent"
    assert not b.smtp.sent
    assert (write.transition.status, write.attempt.transport) == (Status.SENT, "api")


@pytest.mark.parametrize(("answer", "error"), [
    (False, "the claim was lost before the send through api"),
    (DatabaseError("connection lost"), "could not record the fallback api before the send: connection lost"),
], ids=["claim lost", "database error"])
async def test_a_row_whose_carrier_cannot_be_recorded_is_held_back_and_not_sent(
        answer: bool | DatabaseError, error: str) -> None:
    b = context()
    b.ledger.carrier_answer = answer
    write = await carried(b, None, name="api")  # a fallback: not where a rescuer would presume it went
    assert not b.api.sent and not b.smtp.sent, "never sent unrecorded"
    assert write.transition.status is Status.PENDING and write.transition.refund_attempt, "not charged"
    assert (write.attempt.outcome, write.attempt.error) == (OutcomeKind.TRANSIENT, error)


async def test_an_unreachable_own_transport_with_an_open_fallback_makes_the_row_due_at_once() -> None:
    b = context()
    write = await carried(b, Outcome.unreachable("connection refused"))
    assert b.ctx.gates["smtp"].is_paused(monotonic()), "the breaker paused smtp"
    assert (write.transition.status, write.transition.scheduled_at) == (Status.PENDING, NOW), \
        "the claim now routes the row to api: it is due now"


async def test_each_member_of_a_batch_is_recorded_with_its_own_answer() -> None:
    b = context()
    rows = [make_delivery(n, transport="api") for n in (1, 2, 3)]
    b.claim(*rows)
    b.api.batch_answers.append([Outcome.sent("re-1"), Outcome.transient("rate limited", reply_code=500),
                                SendSingly("too big for a batch")])
    b.api.answers.append(Outcome.sent("re-3"))
    await Executor(b.ctx).carry_batch(rows, "api")
    key = batch_idempotency_key(["k-1", "k-2", "k-3"])
    assert b.api.requests == [(key, ["k-1", "k-2", "k-3"])]
    assert [(t, k, ids) for t, k, ids, _ in b.ledger.batches] == [("api", key, [1, 2, 3])], \
        "recorded with its key before the request"
    assert [d.dedupe_key for d in b.api.sent] == ["k-3"], "the member the provider did not judge went singly"
    statuses = {w.delivery.dedupe_key: (w.transition.status, w.attempt.transport) for w in b.recorder.writes}
    assert statuses == {"k-1": (Status.SENT, "api"), "k-2": (Status.PENDING, "api"), "k-3": (Status.SENT, "api")}


async def test_an_ambiguous_batch_answer_gives_the_whole_batch_up_to_the_rescuer() -> None:
    b = context()
    rows = [make_delivery(n, transport="api") for n in (1, 2)]
    b.claim(*rows)
    safe = NOW.replace(year=NOW.year + 1)
    b.api.batch_answers.append([Outcome.ambiguous("timed out", resend_safe_until=safe)] * 2)
    await Executor(b.ctx).carry_batch(rows, "api")
    assert not b.recorder.writes, "no outcome: the rows stay 'sending' for a rescuer"
    [(ids, attempts)] = b.ledger.given_up
    assert ids == [1, 2] and {a.outcome for a in attempts} == {OutcomeKind.AMBIGUOUS}
    assert len(b.ctx.inflight) == 0, "no longer held by this daemon"


async def test_rows_handed_as_a_batch_to_a_transport_without_a_batch_side_go_singly() -> None:
    b = context()
    rows = [make_delivery(n) for n in (1, 2)]
    b.claim(*rows)
    b.smtp.answers += [Outcome.sent("q-1"), Outcome.sent("q-2")]
    await Executor(b.ctx).carry_batch(rows, "smtp")
    assert [d.dedupe_key for d in b.smtp.sent] == ["k-1", "k-2"] and not b.ledger.batches
    assert {w.transition.status for w in b.recorder.writes} == {Status.SENT}


async def test_a_row_sent_through_a_fallback_is_due_at_once_when_its_own_transport_reopened_meanwhile() -> None:
    b = context()  # smtp (the row's own) is open again; api, its fallback, has no fallback of its own
    write = await carried(b, Outcome.unreachable("connection refused"), name="api")
    assert (write.transition.status, write.transition.scheduled_at, write.attempt.transport) == (
        Status.PENDING, NOW, "api"), "the claim now routes the row back to smtp: due now, not after api's pause"


class HeldBatchTransport(ScriptedBatchTransport):
    """A batch endpoint whose request never answers: it has started, and may have reached the provider."""

    async def send_batch(self, messages: Sequence[ComposedMessage], deliveries: Sequence[Delivery],
                         key: str) -> list[BatchOutcome]:
        self.requests.append((key, [d.dedupe_key for d in deliveries]))
        await anyio.sleep_forever()
        raise AssertionError("never answered")


async def test_a_batch_waiting_for_its_lanes_request_budget_when_the_shutdown_cuts_it_off_goes_back_untried(
        ) -> None:
    b = context()
    rows = [make_delivery(n, transport="api") for n in (1, 2)]
    b.claim(*rows)
    budget = anyio.CapacityLimiter(1)
    await budget.acquire()  # the lane's one request slot, taken by another request
    async with anyio.create_task_group() as sends:
        sends.start_soon(Executor(b.ctx).carry_batch, rows, "api", budget)
        while not budget.statistics().tasks_waiting:
            await anyio.lowlevel.checkpoint()
        sends.cancel_scope.cancel()  # the grace period is over
    assert not b.api.requests and not b.ledger.batches, "no request, none recorded"
    assert {w.delivery.id: (w.transition.status, w.transition.given_back, w.transition.refund_attempt)
            for w in b.recorder.writes} == dict.fromkeys([1, 2], (Status.PENDING, True, True)), \
        "each member back untried: pending as it was, not charged, no attempt written"
    assert b.ctx.inflight.sending == 0


async def test_a_batch_whose_request_started_when_the_shutdown_cuts_it_off_is_left_sending_for_a_rescuer(
        ) -> None:
    b = context()
    held = HeldBatchTransport("api", events=b.events)
    b.ctx.transports["api"] = held
    rows = [make_delivery(n, transport="api") for n in (1, 2)]
    b.claim(*rows)
    async with anyio.create_task_group() as sends:
        sends.start_soon(Executor(b.ctx).carry_batch, rows, "api")
        while not held.requests:
            await anyio.lowlevel.checkpoint()
        sends.cancel_scope.cancel()
    assert [ids for _, _, ids, _ in b.ledger.batches] == [[1, 2]], "recorded before its request, for a rescuer"
    assert not b.recorder.writes, "no outcome written: the rows stay 'sending', the rescuer resends the batch"
    assert len(b.ctx.inflight) == 0, "no longer held by this daemon"
