"""The recorder's gathering window, on a fake clock: outcomes are coalesced into fewer writes, and no
outcome waits in memory longer than the window (the crash window that coalescing adds: a kill -9
then leaves at most that much sent but unrecorded, besides the write under way)."""

from __future__ import annotations

from collections import deque

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from outbox_mailer.daemon.recorder import RECORD_BATCH, Gathering, gather

pytestmark = pytest.mark.anyio


class ArrivingOutcomes:
    """Outcomes that arrive at scripted times on a fake clock, each one its arrival time. ``take(s)`` is the
    recorder's receive with a timeout: the next outcome if it arrives within ``s`` (the clock moves to its
    arrival), else None once ``s`` has passed."""

    def __init__(self, arrivals: list[float]) -> None:
        self.now = 0.0
        self.arrivals = deque(sorted(arrivals))

    def clock(self) -> float:
        return self.now

    async def take(self, seconds: float) -> float | None:
        if self.arrivals and self.arrivals[0] <= self.now + seconds:
            self.now = max(self.now, self.arrivals.popleft())
            return self.now
        self.now += seconds
        return None

    async def writes(self, window: Gathering, sending: int) -> list[tuple[float, list[float]]]:
        """What the recorder writes: (when the write starts, the arrival times of its outcomes)."""
        out = []
        while self.arrivals:
            first = self.arrivals.popleft()  # the recorder waits for a first outcome without a deadline
            self.now = max(self.now, first)
            batch = await gather(first, self.take, self.clock, lambda: sending, lambda: False, window)
            out.append((self.now, batch))
        return out


def run(arrivals: list[float], window: Gathering, sending: int) -> list[tuple[float, list[float]]]:
    return anyio.run(ArrivingOutcomes(arrivals).writes, window, sending)


@settings(max_examples=300, deadline=None)
@given(arrivals=st.lists(st.floats(0, 2.0, allow_nan=False), max_size=120),
       concurrency=st.integers(1, 64), sending=st.integers(0, 64))
def test_no_outcome_waits_for_its_write_longer_than_the_window(arrivals: list[float], concurrency: int,
                                                               sending: int) -> None:
    window = Gathering.for_concurrency(concurrency)
    writes = run(arrivals, window, sending)
    assert [t for _, batch in writes for t in batch] == sorted(arrivals), "each outcome written once, in order"
    for started, batch in writes:
        assert started - batch[0] <= window.seconds + 1e-9  # the first waits longest
        assert len(batch) <= RECORD_BATCH


@settings(max_examples=100, deadline=None)
@given(arrivals=st.lists(st.floats(0, 2.0, allow_nan=False), min_size=1, max_size=120))
def test_with_nothing_in_flight_each_outcome_is_written_when_it_arrives(arrivals: list[float]) -> None:
    for started, batch in run(arrivals, Gathering.for_concurrency(8), sending=0):
        assert started == batch[-1], "nothing more can come: no wait"


def test_outcomes_of_a_relay_pace_share_a_write_of_half_the_concurrency() -> None:
    """Concurrency 8, 4 connections and a relay taking 50 ms: an outcome every 12.5 ms."""
    window = Gathering.for_concurrency(8)
    writes = run([0.0125 * i for i in range(40)], window, sending=8)
    assert [len(batch) for _, batch in writes] == [4] * 10
    assert window.seconds <= 0.050


def test_at_the_default_concurrency_a_relay_pace_fills_writes_within_the_window_not_beyond() -> None:
    """The default settings (concurrency 16, 4 connections) and the same relay: up to 8 outcomes per write,
    but no outcome waits more than the window, so a write takes the 4 or 5 that come within 50 ms."""
    window = Gathering.for_concurrency(16)
    assert window.outcomes == 8 and window.seconds <= 0.050
    writes = run([0.0125 * i for i in range(40)], window, sending=16)
    sizes = [len(batch) for _, batch in writes]
    assert set(sizes[:-1]) == {4, 5} and sum(sizes) == 40, sizes  # the last write takes what is left
    assert all(started - batch[0] <= window.seconds + 1e-9 for started, batch in writes)


def test_the_window_is_bounded_in_count_by_what_is_held() -> None:
    assert Gathering.for_concurrency(1).outcomes == 1
    assert Gathering.for_concurrency(8).outcomes == 4
    assert Gathering.for_concurrency(10_000).outcomes == RECORD_BATCH
