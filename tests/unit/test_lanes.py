"""A lane's queue and workers (no sockets: a handler that never waits)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from outbox_mailer.daemon.lanes import QUEUE_PER_WORKER, YIELD_EVERY_ROWS, Lane

pytestmark = pytest.mark.anyio


class Instant:
    name = "instant"
    max_parallel = 2
    send_timeout_seconds = 1.0
    idempotency_window_seconds = None


def gate() -> Lane:
    return Lane("instant", Instant.max_parallel)


async def test_rows_are_handled_in_order_and_other_tasks_run_between_them() -> None:
    g = gate()
    handled: list[Any] = []
    seen_by_other_task: list[int] = []

    async def handle(row: Any) -> None:  # completes without ever waiting
        handled.append(row)

    async def other_task() -> None:
        await anyio.lowlevel.checkpoint()
        seen_by_other_task.append(len(handled))

    async with anyio.create_task_group() as tg:
        tg.start_soon(g.serve, handle)
        await anyio.sleep(0.01)  # the worker is idle now
        for row in range(100):
            g.submit(row)  # type: ignore[arg-type]
        tg.start_soon(other_task)
        with anyio.fail_after(2):
            while len(handled) < 100:
                await anyio.sleep(0.001)
        tg.cancel_scope.cancel()
    assert handled == list(range(100))
    assert seen_by_other_task and seen_by_other_task[0] < 100, "one worker held the event loop for the whole queue"
    assert seen_by_other_task[0] <= YIELD_EVERY_ROWS * Instant.max_parallel  # each worker yields as often


async def test_room_counts_idle_workers_and_one_waiting_row_each() -> None:
    g = gate()
    assert g.room == (1 + QUEUE_PER_WORKER) * Instant.max_parallel
    g.submit(object())  # type: ignore[arg-type]
    assert g.room == (1 + QUEUE_PER_WORKER) * Instant.max_parallel - 1
    assert len(g.take_queued()) == 1 and g.room == (1 + QUEUE_PER_WORKER) * Instant.max_parallel


async def test_room_within_requests_counts_a_request_per_busy_worker_and_per_batch_queued() -> None:
    lane = Lane("resend", workers=4, batch_limit=100)
    assert lane.room_within(2) == 200, "two requests carry two batches"
    assert lane.room_within(0) == 0
    for row in range(150):
        lane.submit(row)  # type: ignore[arg-type]
    assert lane.room_within(2) == 50, "the rows queued fill the first batch and half the second"
    started = anyio.Event()

    async def handle_batch(rows: list[Any]) -> None:
        started.set()
        await anyio.sleep_forever()

    async with anyio.create_task_group() as tg:
        tg.start_soon(lane.serve, handle_batch, handle_batch)  # type: ignore[arg-type]
        await started.wait()  # one worker holds a batch of 100: one request in hand, 50 rows queued
        assert lane.room_within(2) == 50 and lane.room_within(3) == 150
        tg.cancel_scope.cancel()


async def test_a_batching_lane_has_room_for_a_batch_per_free_request_slot() -> None:
    lane = Lane("resend", workers=4, batch_limit=100)
    assert lane.room == 400
    for row in range(150):
        lane.submit(row)  # type: ignore[arg-type]
    assert lane.room == 250
    requests = [object() for _ in range(4)]  # requests under way, rows sent singly say: a slot each
    lane.requests.acquire_on_behalf_of_nowait(requests[0])
    assert lane.room == 150, "three free slots carry three batches, less the rows queued"
    for request in requests[1:]:
        lane.requests.acquire_on_behalf_of_nowait(request)
    assert lane.room == 0, "no slot free: rows claimed now would only wait"
