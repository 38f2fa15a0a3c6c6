"""The shared limits in a real PostgreSQL (sql/0011_shared_limits.sql, quotas.py): grants of
request slots and of recipients, serialised across connections as across daemons."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from outbox_mailer.daemon.breaker import Breaker
from outbox_mailer.daemon.gate import TransportGate
from outbox_mailer.daemon.quotas import HORIZON_SECONDS, SharedLimit, throttling
from outbox_mailer.delivery import Cause, Outcome
from outbox_mailer.settings.limits import LimitSettings
from outbox_mailer.store.limits import LimitStore

pytestmark = pytest.mark.anyio
RECOVERY = 300.0


@pytest.fixture
async def ledgers(db_url: str) -> AsyncIterator[list[LimitStore]]:
    """Three ledgers on their own connections: three daemons' views of the same limits."""
    opened = [LimitStore(db_url) for _ in range(3)]
    yield opened
    for ledger in opened:
        await ledger.close()


async def take(ledger: LimitStore, *, rate: float | None = 10.0, burst: int = 1, requests: int = 0,
               daily: int | None = None, window: float = 86_400.0, recipients: int = 0, transport: str = "resend",
               **kw: Any) -> Any:
    return await ledger.take_capacity(transport, rate=rate, burst=burst, requests=requests, horizon=HORIZON_SECONDS,
                                      daily_limit=daily, window=window, recipients=recipients, recovery=RECOVERY, **kw)


async def test_a_grant_reserves_the_slots_due_within_the_horizon_and_the_next_daemon_queues_after_them(
        ledgers: list[LimitStore]) -> None:
    first = await take(ledgers[0], requests=50)
    assert first.requests == 11 and first.spacing == pytest.approx(0.1), "due now, then every 0.1 s up to 1 s"
    assert first.first_in <= 0
    second = await take(ledgers[1], requests=50)
    assert second.requests == 0, "every slot within the horizon is taken"
    assert second.first_in == pytest.approx(1.1, abs=0.05), "the next free slot follows the first daemon's"


async def test_burst_lets_that_many_requests_go_at_once(ledgers: list[LimitStore]) -> None:
    grant = await take(ledgers[0], rate=2.0, burst=5, requests=5)
    assert grant.requests == 5
    assert [max(0.0, grant.first_in + i * grant.spacing) for i in range(5)] == [0.0] * 5


@pytest.mark.alone  # a rate or timing bound: no other test meanwhile (tests/conftest.py)
async def test_three_daemons_together_get_no_more_than_the_rate_plus_the_burst(ledgers: list[LimitStore]) -> None:
    rate, burst, seconds = 20.0, 3, 3.0
    due: list[float] = []

    async def daemon(ledger: LimitStore) -> None:
        while time.monotonic() < start + seconds:
            grant = await take(ledger, rate=rate, burst=burst, requests=8)
            now = time.monotonic()
            due.extend(now + max(0.0, grant.first_in + i * grant.spacing) for i in range(grant.requests))
            await anyio.sleep(0.05 if grant.requests else max(grant.first_in - HORIZON_SECONDS, 0.01))

    start = time.monotonic()
    async with anyio.create_task_group() as tg:
        for ledger in ledgers:
            tg.start_soon(daemon, ledger)
    within = [t for t in due if t < start + seconds]
    assert len(within) <= rate * seconds + burst, len(within)
    assert len(within) >= rate * seconds * 0.9, f"the limit is used, not starved: {len(within)}"


async def test_a_daily_limit_counts_recipients_over_the_rolling_window(ledgers: list[LimitStore]) -> None:
    window = 2.0
    assert (await take(ledgers[0], rate=None, daily=5, window=window, recipients=3)).recipients == 3
    short = await take(ledgers[1], rate=None, daily=5, window=window, recipients=3)
    assert (short.recipients, short.used) == (2, 5), "only what is left, counted for every daemon"
    full = await take(ledgers[2], rate=None, daily=5, window=window, recipients=1)
    assert full.recipients == 0 and 0 < full.free_in <= window * 1.01 + 0.05
    await anyio.sleep(full.free_in + 0.05)
    again = await take(ledgers[2], rate=None, daily=5, window=window, recipients=4)
    assert again.recipients == 4, "the window moved on"


async def test_recipients_given_back_can_be_granted_again(ledgers: list[LimitStore]) -> None:
    held = await take(ledgers[0], rate=None, daily=4, recipients=4)
    assert (await take(ledgers[1], rate=None, daily=4, recipients=1)).recipients == 0
    await take(ledgers[0], rate=None, recipients=0, returned=3, returned_slot=held.slot)
    assert (await take(ledgers[1], rate=None, daily=4, recipients=3)).recipients == 3


async def test_throttling_halves_the_shared_rate_once_per_cooldown_and_it_climbs_back(
        ledgers: list[LimitStore]) -> None:
    async def throttle(ledger: LimitStore, hold: float = 0.0) -> Any:
        return await ledger.throttle("resend", factor=0.5, min_share=1 / 64, hold=hold, recovery=RECOVERY,
                                     cooldown=2.0)

    first = await throttle(ledgers[0])
    assert first.lowered and first.share == pytest.approx(0.5, abs=0.001)
    echo = await throttle(ledgers[1])
    assert not echo.lowered and echo.share == pytest.approx(0.5, abs=0.001), "a reply to a request already sent"
    grant = await take(ledgers[2], rate=30.0, requests=1)
    assert grant.rate == pytest.approx(15.0, abs=0.05) and grant.throttles == 1
    await anyio.sleep(1.5)
    later = await take(ledgers[2], rate=30.0, requests=1)
    assert 15.0 < later.rate < 15.0 + 30.0 * 2 / RECOVERY, "it climbs back gradually"


async def test_a_throttling_hold_holds_every_daemon_off(ledgers: list[LimitStore]) -> None:
    await ledgers[0].throttle("resend", factor=0.5, min_share=1 / 64, hold=3.0, recovery=RECOVERY, cooldown=2.0)
    grant = await take(ledgers[1], rate=10.0, requests=5)
    assert grant.requests == 0 and grant.first_in == pytest.approx(3.0, abs=0.1)


def test_throttling_replies_are_told_apart_from_other_refusals() -> None:
    assert throttling(Outcome.transient("HTTP 429 rate_limit_exceeded", reply_code=429))
    assert throttling(Outcome.transient("DATA: 454 4.7.0 Throttling failure", reply_code=454, enhanced_code="4.7.0"))
    assert throttling(Outcome.transient("MAIL: 451 4.7.1 slow down", reply_code=451, enhanced_code="4.7.1"))
    assert throttling(Outcome.transient("MAIL: 421 4.7.0 try later", reply_code=421, enhanced_code="4.7.0"))
    assert not throttling(Outcome.transient("RCPT: 451 4.3.0 local error", reply_code=451, enhanced_code="4.3.0"))
    assert not throttling(Outcome.paused("HTTP 429 daily_quota_exceeded", 60, reply_code=429)), "a quota pauses"
    assert not throttling(Outcome.permanent("HTTP 422", reply_code=422))
    assert Outcome.transient("x", reply_code=429).cause is Cause.TRANSIENT


# -- SharedLimit: the daemon's side ------------------------------------------------------------------


async def test_sends_wait_for_their_slots_and_one_grant_serves_every_waiting_send(
        ledgers: list[LimitStore]) -> None:
    limit = SharedLimit("resend", LimitSettings(rate_per_second=10.0), ledgers[0])
    started: list[float] = []

    async def send() -> None:
        assert await limit.take(1) is None
        started.append(time.monotonic())

    begun = time.monotonic()
    async with anyio.create_task_group() as tg:
        for _ in range(8):
            tg.start_soon(send)
    # the k-th send may start no earlier than k slots of 0.1 s after the first could: a late wake-up under
    # load only delays a send, so this bound holds however busy the machine is (gaps between wake-ups need not)
    early = [(k, round(t - begun, 3)) for k, t in enumerate(sorted(started)) if t - begun < k * 0.1 - 0.005]
    assert not early, f"sends started before their slots: {early}"
    assert limit.grants <= 2, f"{limit.grants} grants for 8 sends"


async def test_a_full_window_pauses_with_the_time_until_it_has_room(ledgers: list[LimitStore]) -> None:
    limit = SharedLimit("ses", LimitSettings(daily_limit=3, daily_window_seconds=5), ledgers[0])
    assert await limit.take(2) is None and limit.daily_remaining == 1
    outcome = await limit.take(2)
    assert outcome is not None and outcome.cause is Cause.PAUSED and 1 <= (outcome.pause_seconds or 0) <= 5.1
    assert "DAILY_LIMIT of transport 'ses' reached: 3 of 3 recipients" in (outcome.error or "")
    too_many = await limit.take(4)
    assert too_many is not None and too_many.cause is Cause.UNSENDABLE and "more than DAILY_LIMIT (3)" in too_many.error


async def test_recipients_a_daemon_holds_unused_go_back_when_it_stops(ledgers: list[LimitStore]) -> None:
    limit = SharedLimit("ses", LimitSettings(daily_limit=3000), ledgers[0])
    assert await limit.take(1) is None
    assert limit.held == 2, "a grant takes a chunk of the limit (0.1%), not one recipient"
    await limit.give_back()
    other = await take(ledgers[1], rate=None, daily=3000, recipients=3000, transport="ses")
    assert other.recipients == 2999 and other.used == 3000


async def test_a_lowered_rate_never_brings_a_burst_forward_and_a_retry_after_holds_every_burst(
        ledgers: list[LimitStore]) -> None:
    burst = await take(ledgers[0], rate=10.0, burst=20, requests=40)
    assert burst.requests >= 20, "a full bucket: the burst and the horizon's slots"
    await ledgers[1].throttle("resend", factor=0.5, min_share=1 / 64, hold=2.0, recovery=RECOVERY, cooldown=2.0)
    after = await take(ledgers[2], rate=10.0, burst=20, requests=40)
    assert after.requests == 0 and after.first_in == pytest.approx(2.0, abs=0.1), "nothing before the Retry-After"


async def test_held_recipients_are_not_used_after_the_slot_that_counts_them(ledgers: list[LimitStore]) -> None:
    limit = SharedLimit("ses", LimitSettings(daily_limit=3000, daily_window_seconds=10), ledgers[0])
    assert await limit.take(1) is None and limit.held == 2 and limit.grants == 1
    await anyio.sleep(0.15)  # a slot is 0.1 s long
    assert await limit.take(1) is None
    assert limit.grants == 2, "the two held recipients ended with their slot: a new grant"
    assert limit.daily_used == 4, "and they went back with it: 1 used, then 3 more granted"


async def test_a_wait_at_the_shared_schedule_is_seen_by_failover_routing(ledgers: list[LimitStore]) -> None:
    await ledgers[0].throttle("resend", factor=0.5, min_share=1 / 64, hold=5.0, recovery=RECOVERY, cooldown=2.0)
    gate = TransportGate("resend", Breaker(1.0, 30.0), SharedLimit("resend", LimitSettings(rate_per_second=10.0),
                                                                    ledgers[1]))
    with anyio.move_on_after(0.3):
        await gate.admit(1)
    assert gate.held_off_seconds(anyio.current_time()) > 4.0, "another daemon's 429 holds this one off too"


async def test_a_grant_the_database_cannot_answer_holds_the_send_back_uncharged() -> None:
    from tests.smtp_server import free_port

    ledger = LimitStore(f"postgresql://postgres@127.0.0.1:{free_port()}/postgres")  # nothing listens there
    limit = SharedLimit("resend", LimitSettings(rate_per_second=10.0, daily_limit=100), ledger)
    outcome = await limit.take(1)
    assert outcome is not None and outcome.cause is Cause.HELD_BACK and not outcome.charge_attempt
    assert "cannot take a grant of its shared limits" in (outcome.error or "") and outcome.retry_after_seconds
    await ledger.close()


async def test_a_send_that_must_start_before_its_slot_is_unstarted_and_the_slot_stays_for_the_next(
        ledgers: list[LimitStore]) -> None:
    limit = SharedLimit("resend", LimitSettings(rate_per_second=1.0), ledgers[0])
    assert await limit.take(1) is None, "the first slot is due now"
    assert 0.5 < limit.next_slot_in() <= 1.0, "the next one an interval later"
    late = await limit.take(1, within=0.3)
    assert late is not None and late.cause is Cause.UNSTARTED and not late.charge_attempt
    grants = limit.grants
    assert await limit.take(1, within=1.5) is None, "a send that may wait longer takes that slot"
    assert limit.grants == grants, "the slot granted to the unstarted send, not a new one"
