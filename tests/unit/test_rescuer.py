"""The rescue of dead claims (daemon/rescuer.py: ClaimRescue) with fakes at its ports: a clock,
scripted transports, a recorder and a ledger; no sockets, no database."""

from __future__ import annotations

from datetime import timedelta

import pytest

from outbox_mailer.daemon.rescuer import ClaimRescue
from outbox_mailer.delivery import ComposedMessage, Delivery, Outcome, OutcomeKind, Status
from outbox_mailer.providers.seam import batch_idempotency_key
from outbox_mailer.store import DeadClaim, RecordedBatch
from tests.daemon_fakes import NOW, WORKER, Bundle, context, make_delivery

pytestmark = pytest.mark.anyio

DIED_AT = NOW - timedelta(minutes=10)


def recorded(b: Bundle, members: list[Delivery], *, digest: str | None = None) -> RecordedBatch:
    """The batch as the executor recorded it before its request (the digest of that request, unless given)."""
    key = batch_idempotency_key([d.dedupe_key for d in members])
    if digest is None:
        messages = [b.ctx.preparation.composed(d, NOW) for d in members]
        assert all(isinstance(m, ComposedMessage) for m in messages)
        digest = b.api.batch_digest([m for m in messages if isinstance(m, ComposedMessage)], members, key)
    return RecordedBatch(7, "api", key, tuple(d.id for d in members), sends=1, digest=digest)


async def test_a_recorded_batch_is_resent_whole_under_its_key_when_its_digest_matches() -> None:
    b = context()
    members = [make_delivery(n, transport="api") for n in (1, 2)]
    batch = recorded(b, members)
    b.api.batch_answers.append([Outcome.sent("re-1"), Outcome.sent("re-2")])
    writes = await ClaimRescue(b.ctx).replay(batch, members)
    assert b.api.requests == [(batch.key, ["k-1", "k-2"])], "the identical request, under the recorded key"
    assert writes is not None
    assert [(w.delivery.id, w.transition.status, w.attempt.transport, w.attempt.worker_label) for w in writes] == [
        (1, Status.SENT, "api", f"rescuer {WORKER}"), (2, Status.SENT, "api", f"rescuer {WORKER}")]


async def test_a_recorded_batch_of_rows_with_unsubscribe_links_is_rebuilt_with_them_and_resent_whole() -> None:
    b = context(unsubscribe={"base_url": "https://mail.example.com", "keys": "k" * 16})
    members = [make_delivery(n, transport="api", to_addresses=(f"r{n}@example.com",),
                             unsubscribe_category="newsletter") for n in (1, 2)]
    sent = [await b.ctx.preparation.screened(d, NOW, "api") for d in members]  # as the executor composed them
    messages = [p[1] for p in sent if not isinstance(p, Outcome)]
    key = batch_idempotency_key([d.dedupe_key for d in members])
    batch = RecordedBatch(7, "api", key, (1, 2), sends=1, digest=b.api.batch_digest(messages, members, key))
    b.api.batch_answers.append([Outcome.sent("re-1"), Outcome.sent("re-2")])
    writes = await ClaimRescue(b.ctx).replay(batch, members)
    assert b.api.requests == [(batch.key, ["k-1", "k-2"])], "the identical request, links and all"
    assert writes is not None and {w.transition.status for w in writes} == {Status.SENT}


@pytest.mark.parametrize(("in_doubt", "status"), [("hold", Status.IN_DOUBT), ("resend", Status.PENDING)])
async def test_a_recorded_batch_whose_request_cannot_be_rebuilt_is_not_resent_and_goes_through_the_in_doubt_policy(
        in_doubt: str, status: Status) -> None:
    b = context(in_doubt)
    members = [make_delivery(n, transport="api") for n in (1, 2)]
    batch = recorded(b, members, digest="0" * 64)  # a member's row or the settings changed since
    writes = await ClaimRescue(b.ctx).replay(batch, members)
    assert not b.api.requests and not b.api.sent, "nothing resent"
    assert writes is not None
    assert {(w.transition.status, w.attempt.outcome) for w in writes} == {(status, OutcomeKind.AMBIGUOUS)}
    assert all("can no longer be rebuilt identically" in (w.attempt.error or "") for w in writes)


async def test_a_batch_answer_that_settles_nothing_leaves_the_rows_for_the_next_rescue() -> None:
    b = context()
    members = [make_delivery(n, transport="api") for n in (1, 2)]
    b.api.batch_answers.append([Outcome.unreachable("connection refused")] * 2)
    assert await ClaimRescue(b.ctx).replay(recorded(b, members), members) is None


@pytest.mark.parametrize(("in_doubt", "status"), [("hold", Status.IN_DOUBT), ("resend", Status.PENDING)])
async def test_a_claim_outside_the_idempotency_window_may_not_be_resent_and_goes_through_the_in_doubt_policy(
        in_doubt: str, status: Status) -> None:
    b = context(in_doubt)
    window = b.api.idempotency_window_seconds or 0
    old = make_delivery(1, transport="api", first_attempt_at=NOW - timedelta(seconds=2 * window))
    rescue = ClaimRescue(b.ctx)
    batch = recorded(b, [old])
    assert not rescue.may_resend(batch, [DeadClaim(old, DIED_AT, "gone:1", batch.id, 1)]), \
        "the provider no longer absorbs a repeat under the batch's key"
    write = rescue.unknown(old, DIED_AT, "gone:1")
    assert (write.transition.status, write.attempt.outcome, write.attempt.transport) == (
        status, OutcomeKind.AMBIGUOUS, "api")
    assert write.attempt.started_at == DIED_AT and write.attempt.worker_label == f"rescuer {WORKER}"


async def test_a_claim_inside_the_window_of_a_batching_transport_may_be_resent() -> None:
    b = context("hold")
    young = make_delivery(1, transport="api")
    rescue = ClaimRescue(b.ctx)
    batch = recorded(b, [young])
    assert rescue.may_resend(batch, [DeadClaim(young, DIED_AT, "gone:1", batch.id, 1)])
    assert rescue.unknown(young, DIED_AT, "gone:1").transition.status is Status.PENDING, \
        "alone, under its own key, it is resent while the provider absorbs a repeat"
    batched = rescue.unknown(young, DIED_AT, "gone:1", batch_transport="api")
    assert batched.transition.status is Status.IN_DOUBT, "never resent under its own key after a batch"
