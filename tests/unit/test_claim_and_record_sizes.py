"""Claims and outcome writes of a worthwhile size: each costs PostgreSQL about as much for two rows
as for twenty, so under load the daemon claims and records several rows at a time."""

from __future__ import annotations

from types import SimpleNamespace

import anyio
import pytest

from outbox_mailer.daemon.claimer import Claimer
from outbox_mailer.daemon.inflight import InFlight
from outbox_mailer.daemon.lanes import Lane
from outbox_mailer.daemon.recorder import GATHER_SECONDS, Recorder
from outbox_mailer.settings.config import Settings

pytestmark = pytest.mark.anyio


def rows(n: int, start: int = 0) -> list[SimpleNamespace]:
    return [SimpleNamespace(id=start + i, dedupe_key=f"k{start + i}", content_bytes=0) for i in range(n)]


def claimer(concurrency: int, lanes: dict[str, Lane], batch_size: int = 100) -> tuple[Claimer, InFlight]:
    settings = Settings(database_url="postgresql://x@localhost/x", concurrency=concurrency, batch_size=batch_size)
    inflight = InFlight(concurrency, 60.0)
    return Claimer(settings, None, inflight, None, {}, lanes, None, anyio.Event()), inflight  # type: ignore[arg-type]


def test_an_idle_daemon_claims_a_single_row_at_once() -> None:
    c, _ = claimer(32, {"smtp": Lane("smtp", 8)})
    assert c._worthwhile_claim() == 1


def test_a_daemon_draining_a_backlog_claims_once_half_of_what_it_holds_is_free() -> None:
    c, inflight = claimer(32, {"smtp": Lane("smtp", 8)})
    c.note_claim(wanted=32, got=32)  # the queue had more
    inflight.hold(rows(5), 0.0)  # type: ignore[arg-type]
    assert c._worthwhile_claim() == 16


def test_once_the_queue_was_found_drained_any_free_slot_claims_at_once() -> None:
    c, inflight = claimer(32, {"smtp": Lane("smtp", 8)})
    c.note_claim(wanted=32, got=32)
    inflight.hold(rows(20), 0.0)  # type: ignore[arg-type]
    c.note_claim(wanted=12, got=3)  # the queue is empty: new rows come one at a time, each picked up at once
    assert c._worthwhile_claim() == 1
    c.note_claim(wanted=1, got=1)  # a claim of one says nothing about what is left
    assert c._worthwhile_claim() == 1


def test_the_threshold_never_exceeds_what_the_lanes_can_take() -> None:
    c, inflight = claimer(400, {"smtp": Lane("smtp", 1)})  # one connection: 4 rows at most
    c.note_claim(wanted=4, got=4)
    inflight.hold(rows(1), 0.0)  # type: ignore[arg-type]
    assert c._worthwhile_claim() == 2, "a threshold above the lane's capacity would stall the claims"


def test_a_batching_lane_holds_a_whole_batch_per_worker() -> None:
    assert Lane("resend", 2, batch_limit=100).capacity == 200
    assert Lane("smtp", 2).capacity == 8


def recorder(sending: int) -> Recorder:
    inflight = InFlight(64, 60.0)
    inflight.hold(rows(sending), 0.0)  # type: ignore[arg-type]
    return Recorder(None, anyio.Event(), inflight)  # type: ignore[arg-type]  # no database used


async def test_outcomes_arriving_while_sends_are_in_flight_share_one_write() -> None:
    r = recorder(sending=5)

    async def later() -> None:
        await anyio.sleep(GATHER_SECONDS / 5)
        for w in ("b", "c"):
            r.submit(w)  # type: ignore[arg-type]

    async with anyio.create_task_group() as tg:
        tg.start_soon(later)
        assert await r._gather("a") == ["a", "b", "c"]  # type: ignore[arg-type]


async def test_with_nothing_in_flight_an_outcome_is_written_at_once() -> None:
    r = recorder(sending=0)
    started = anyio.current_time()
    assert await r._gather("a") == ["a"]  # type: ignore[arg-type]
    assert anyio.current_time() - started < GATHER_SECONDS / 2


async def test_gathering_stops_at_its_count_or_its_time() -> None:
    r = recorder(sending=40)
    for i in range(r.window.outcomes + 3):
        r.submit(i)  # type: ignore[arg-type]
    assert len(await r._gather("first")) == r.window.outcomes + 4, "what is ready is always taken"  # type: ignore[arg-type]
    started = anyio.current_time()
    assert await r._gather("alone") == ["alone"]  # type: ignore[arg-type]
    assert GATHER_SECONDS * 0.8 <= anyio.current_time() - started < GATHER_SECONDS * 10


def test_a_batching_lanes_rows_count_one_request_per_batch_limit() -> None:
    inflight = InFlight(8, 60.0, {"resend": 100, "smtp": 1})
    inflight.hold(rows(150), 0.0, ["resend"] * 150)  # type: ignore[arg-type]
    assert inflight.room_on("resend") == 8 * 100 - 150, "the lane may fill the budget's requests with rows"
    assert inflight.room == inflight.room_on("smtp") == 8 - 2, "150 rows of a batching lane are two requests"
    inflight.hold(rows(6, start=1000), 0.0, ["smtp"] * 6)  # type: ignore[arg-type]
    assert inflight.room_on("smtp") == 0 and inflight.room_on("resend") == (8 - 6) * 100 - 150


def test_rows_whose_sends_returned_stay_held_within_twice_the_budget() -> None:
    inflight = InFlight(2, 60.0, {"resend": 100})
    claimed = rows(200)
    inflight.hold(claimed, 0.0, ["resend"] * 200)  # type: ignore[arg-type]
    assert inflight.room_on("resend") == 0, "two requests of a hundred: the sending budget is spent"
    for row in claimed:
        inflight.send_returned(row)  # type: ignore[arg-type]  # outcomes not recorded yet
    assert inflight.room_on("resend") == 200 and inflight.held_on("resend") == 200, \
        "held rows (outcomes waiting for the recorder) count against twice the budget"


def test_a_busy_batching_lane_waits_for_a_whole_batch_of_room() -> None:
    c, inflight = claimer(8, {"resend": Lane("resend", 4, batch_limit=100), "smtp": Lane("smtp", 4)})
    inflight.hold(rows(1), 0.0)  # type: ignore[arg-type]
    assert c._worthwhile_claim("resend") == 100, "a claim per request slot: a batch at a time"
    assert c._worthwhile_claim() == 1, "the other lanes, the queue not yet found busy: at once"
    c.note_claim(wanted=8, got=8)  # a backlog drains
    assert c._worthwhile_claim() == 4, "the other lanes: half of the rows they may hold (CONCURRENCY 8)"


def test_a_batching_lanes_rows_that_go_singly_count_a_request_each() -> None:
    inflight = InFlight(8, 60.0, {"resend": 100})
    claimed = rows(100)
    inflight.hold(claimed, 0.0, ["resend"] * 100)  # type: ignore[arg-type]
    assert inflight.room_on("resend") == 7 * 100
    inflight.go_singly(claimed[:6])  # type: ignore[arg-type]  # attachments, say: found when composed
    assert inflight.singly_on("resend") == 6
    assert inflight.room_on("resend") == (8 - 6) * 100 - 94, "six requests of one row, one batch of 94"
    inflight.go_singly(claimed[6:])  # type: ignore[arg-type]
    assert inflight.room_on("resend") == 0, "a hundred single sends exceed the budget: no claim until they are done"


def test_while_a_batching_lanes_rows_go_singly_a_few_rows_are_worth_a_claim() -> None:
    c, _ = claimer(8, {"resend": Lane("resend", 4, batch_limit=100)})
    c._inflight = inflight = InFlight(8, 60.0, {"resend": 100})
    claimed = rows(3)
    inflight.hold(claimed, 0.0, ["resend"] * 3)  # type: ignore[arg-type]
    assert c._worthwhile_claim("resend") == 100
    inflight.go_singly(claimed)  # type: ignore[arg-type]
    assert c._worthwhile_claim("resend") == 2, "a row a request while some go singly: a quarter of 8"


def test_the_content_held_stops_the_claims_at_twice_concurrency_rows_of_the_size_limit() -> None:
    inflight = InFlight(2, 60.0, {"resend": 100}, max_content_bytes=1000)
    big = [SimpleNamespace(id=i, dedupe_key=f"k{i}", content_bytes=1500) for i in range(3)]
    inflight.hold(big[:2], 0.0, ["resend"] * 2)  # type: ignore[arg-type]
    assert inflight.content_room == 2 * 2 * 1000 - 3000 and inflight.room_on("resend") > 0
    inflight.hold(big[2:], 0.0, ["resend"])  # type: ignore[arg-type]  # a claim's last row may pass the budget
    assert inflight.room_on("resend") == inflight.room == 0, "the content budget is spent: no claim"
    inflight.abandon(big[0])  # type: ignore[arg-type]
    assert inflight.content_room == 1000 and inflight.room_on("resend") > 0


def test_a_batching_lanes_rows_wait_from_their_claim_until_their_request_starts() -> None:
    inflight = InFlight(8, 60.0, {"resend": 100})
    claimed = rows(150)
    inflight.hold(claimed, 0.0, ["resend"] * 150)  # type: ignore[arg-type]
    inflight.hold(rows(3, start=1000), 0.0, ["smtp"] * 3)  # type: ignore[arg-type]
    assert inflight.waiting_on("resend") == 150 and inflight.waiting_on("smtp") == 0
    inflight.started(claimed[:100])  # type: ignore[arg-type]  # a batch recorded, its request under way
    assert inflight.waiting_on("resend") == 50
    for row in claimed[100:]:
        inflight.send_returned(row)  # type: ignore[arg-type]  # never started: held back, say
    assert inflight.waiting_on("resend") == 0
