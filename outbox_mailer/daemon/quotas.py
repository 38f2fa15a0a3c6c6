"""A transport's limits, shared by every daemon on the database: this daemon's grants of them.

``RATE_PER_SECOND``/``BURST`` (requests) and ``DAILY_LIMIT`` (recipients over a rolling
``DAILY_WINDOW_SECONDS``) live in PostgreSQL (sql/0011_shared_limits.sql). A :class:`SharedLimit`
takes capacity from there **a batch at a time**, never a round trip per email:

* **requests**: one grant reserves a slot for every send waiting at this transport's gate, the
  slots due within ``HORIZON_SECONDS`` at the rate in force; each send then waits for its slot
  here. All daemons' slots come from one schedule (a generic cell rate algorithm), so together
  they never exceed the rate plus the burst. A slot more than ``LATE_SHARE`` of an interval late
  is dropped, not used (late slots would go out together). The burst's tolerance is reckoned at
  the configured rate, so a lowered rate never brings a slot forward. A send that must start by
  a deadline (its claim would be too old to start after it) does not wait for a slot due later:
  it is answered ``unstarted`` and the slot stays for the next send; :meth:`next_slot_in` tells
  the claim loop when that is (it claims for a lane only what its slots start in time);
* **recipients**: a grant takes what the send needs for each send waiting, or ``DAILY_CHUNK`` of
  the limit when that is more (round trips stay rare at large limits). Held recipients are used
  before the usage slot they are counted in ends (sent later, they would fall outside windows
  that count them); what is left then goes back with the next grant, and all of it when the
  daemon stops. A grant counts the recipients when it is taken, before the send: a send that
  fails still counts, so the limit is never exceeded.

When the window has no room for a send's recipients, :meth:`take` answers ``paused`` until the
oldest counted slot leaves the window: the gate pauses the transport, so its rows stay
``pending`` without an attempt charged, or go through its fallback (failover.py).

**Adaptive throttling**: a reply that says we send too fast (:func:`throttling`) lowers the shared
rate to ``THROTTLE_FACTOR`` of the rate in force (at most once per ``THROTTLE_COOLDOWN_SECONDS``,
never below ``MIN_SHARE`` of ``RATE_PER_SECOND``) and holds every daemon off for its Retry-After;
the rate then climbs back linearly, from zero to full in ``RECOVERY_SECONDS``. The report goes to
PostgreSQL with this transport's next grant. A transport without ``RATE_PER_SECOND`` has no shared
rate to lower: the reply is retried after its Retry-After as any transient one.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import anyio

from ..delivery import Cause, Outcome
from ..errors import DatabaseError
from ..settings.limits import LimitSettings
from ..store.limits import Grant, LimitStore, Throttled

log = logging.getLogger("outbox_mailer")

HORIZON_SECONDS = 1.0  # a grant reserves request slots due within this long
LATE_SHARE = 0.25  # of the interval between slots: a slot this late is dropped
SLOT_MARGIN_SECONDS = 0.05  # held recipients are used this long before their slot ends (at most half the slot)
DAILY_CHUNK = 0.001  # of DAILY_LIMIT: the fewest recipients one grant takes
THROTTLE_FACTOR = 0.5
THROTTLE_COOLDOWN_SECONDS = 2.0  # replies to requests already under way say nothing new
MIN_SHARE = 1 / 64
RECOVERY_SECONDS = 300.0
RETRY_GRANT_SECONDS = 1.0  # the database could not be reached for a grant: the row retries after this


class Ledger(Protocol):
    """Where the shared limits are kept (store/limits.py's LimitStore). Both raise DatabaseError."""

    async def take_capacity(self, transport: str, *, rate: float | None, burst: int, requests: int,
                            horizon: float, daily_limit: int | None, window: float, recipients: int,
                            returned: int = 0, returned_slot: datetime | None = None,
                            recovery: float) -> Grant: ...

    async def throttle(self, transport: str, *, factor: float, min_share: float, hold: float, recovery: float,
                       cooldown: float) -> Throttled: ...


def throttling(outcome: Outcome) -> bool:
    """The far side says we send too fast: a 429 that names no quota (a quota pauses instead), or an
    SMTP 421, 451 4.7.x or 454 4.7.x (Amazon SES: ``454 4.7.0 Throttling failure``)."""
    if outcome.cause is not Cause.TRANSIENT:
        return False
    code, enhanced = outcome.reply_code, outcome.enhanced_code or ""
    return code in (429, 421) or (code in (451, 454) and enhanced.startswith("4.7."))


@dataclass(slots=True)
class _Held:
    slot: datetime  # the usage slot these recipients are counted in
    left: int
    usable_until: float  # monotonic: the slot's end (a recipient sent later would escape the windows counting it)


class SharedLimit:
    def __init__(self, name: str, settings: LimitSettings, ledger: Ledger, *,
                 clock: Callable[[], float] | None = None) -> None:
        self.name = name
        self.rate = settings.effective_rate_per_second
        self.burst = settings.burst
        self.daily_limit = settings.daily_limit
        self.window = settings.daily_window_seconds
        self._ledger = ledger
        self._clock = clock or anyio.current_time
        self._lock = anyio.Lock()  # FIFO: one send at a time takes its slot
        self._waiting = 0  # sends waiting here: the next grant reserves a slot for each
        self._slots: deque[float] = deque()  # due times (monotonic) of the request slots granted to us
        self._late = 0.0  # a slot this late is dropped (LATE_SHARE of the interval)
        self._last_slot = -math.inf  # due time of the last slot taken: the next is an interval later, or so
        self.held_until = 0.0  # monotonic: no slot is due before then (failover.py routes around a long wait)
        self._allowance: deque[_Held] = deque()  # recipients granted and not yet used, oldest first
        self._unused: deque[_Held] = deque()  # held ones whose slot ended: to give back
        self._throttle_hold: float | None = None  # a throttling reply to report with the next grant
        self._chunk = max(1, math.ceil((self.daily_limit or 0) * DAILY_CHUNK))
        # the state as of the last grant: the metrics and the log show it
        self.rate_in_force = self.rate
        self.throttles = 0
        self.daily_used: int | None = None
        self.grants = 0  # round trips for grants (a metric: far fewer than sends)

    @property
    def daily_remaining(self) -> int | None:
        if self.daily_limit is None or self.daily_used is None:
            return self.daily_limit
        return max(0, self.daily_limit - self.daily_used)

    @property
    def held(self) -> int:
        """Recipients granted to this daemon and not used yet."""
        return sum(h.left for h in self._allowance)

    def next_slot_in(self) -> float:
        """Seconds until this daemon's next request slot (granted, or reckoned an interval at the rate in
        force after the last one taken; 0 when it could be now)."""
        now = self._clock()
        if self._slots:
            return max(0.0, self._slots[0] - now)
        if self.rate_in_force is None:
            return 0.0
        return max(0.0, self._last_slot + 1 / self.rate_in_force - now)

    async def take(self, recipients: int, within: float = math.inf) -> Outcome | None:
        """Wait for a request slot (one due within ``within`` seconds) and room for ``recipients``; None
        when the send may start now, else why it may not (no slot in time: unstarted; the window full:
        paused; the database unreachable: held back)."""
        if self.daily_limit is not None and recipients > self.daily_limit:
            return Outcome.unsendable(f"{recipients} recipients: more than DAILY_LIMIT ({self.daily_limit}) of "
                                      f"transport {self.name!r} allows in one window")
        deadline = self._clock() + within
        self._waiting += 1
        try:
            async with self._lock:
                return await self._take(recipients, deadline)
        finally:
            self._waiting -= 1

    async def _take(self, recipients: int, deadline: float) -> Outcome | None:
        if self.rate is not None:  # a slot first (a grant for it takes the recipients too, when short)
            while True:
                now = self._clock()
                while self._slots and self._slots[0] < now - self._late:
                    self._slots.popleft()  # too late: used now, it could go out together with the next one
                if self._slots:
                    break
                short = self._short(recipients, now)
                try:
                    grant = await self._grant(self._waiting, short)
                except DatabaseError as exc:
                    return self._unreachable(exc)
                if grant.recipients < short:
                    return self._window_full(grant)
                if not self._slots:  # none due within the horizon: ask again when one is
                    self.held_until = self._clock() + grant.first_in
                    if self.held_until > deadline:
                        return self._too_late()
                    await anyio.sleep(max(grant.first_in - HORIZON_SECONDS, 0.001))
            if self._slots[0] > deadline:
                return self._too_late()  # the slot stays for a later send
            self._last_slot = self._slots.popleft()
            wait = self._last_slot - self._clock()
            if wait > 0:
                await anyio.sleep(wait)
        if self.daily_limit is not None:  # recipients usable now (held ones end with their slot)
            short = self._short(recipients, self._clock())
            if short:
                try:
                    grant = await self._grant(0, short)
                except DatabaseError as exc:
                    return self._unreachable(exc)
                if grant.recipients < short:
                    return self._window_full(grant)
            self._spend(recipients)  # right after the grant: nothing awaited since
        return None

    def _short(self, recipients: int, now: float) -> int:
        """Recipients missing for a send of ``recipients`` (held ones whose slot ended are dropped)."""
        if self.daily_limit is None:
            return 0
        while self._allowance and self._allowance[0].usable_until <= now:
            self._unused.append(self._allowance.popleft())  # given back with the next grant
        return max(0, recipients - self.held)

    def _too_late(self) -> Outcome:
        return Outcome.unstarted(f"transport {self.name!r}: no request slot before the claim is too old to start")

    def _unreachable(self, exc: Exception) -> Outcome:
        return Outcome.held_back(f"transport {self.name!r}: cannot take a grant of its shared limits: {exc}",
                                 retry_after_seconds=RETRY_GRANT_SECONDS)

    async def _grant(self, requests: int, recipients: int) -> Grant:
        if self._throttle_hold is not None:
            await self._report_throttle()
        returned = self._unused.popleft() if self._unused else None
        try:
            grant = await self._ledger.take_capacity(
                self.name, rate=self.rate, burst=self.burst, requests=requests, horizon=HORIZON_SECONDS,
                daily_limit=self.daily_limit, window=self.window,
                # the other waiting sends are likely to need as many: one grant for them all
                recipients=max(recipients * max(1, self._waiting), self._chunk) if recipients > 0 else 0,
                returned=returned.left if returned else 0, returned_slot=returned.slot if returned else None,
                recovery=RECOVERY_SECONDS)
        except DatabaseError:
            if returned is not None:
                self._unused.appendleft(returned)
            raise
        now = self._clock()
        self.grants += 1
        self._slots.extend(now + max(0.0, grant.first_in + i * grant.spacing) for i in range(grant.requests))
        self._late = LATE_SHARE * grant.spacing
        if grant.requests:
            self.held_until = 0.0
        if grant.recipients and grant.slot is not None:
            margin = min(SLOT_MARGIN_SECONDS, grant.slot_left / 2)  # a short window's slots are short
            self._allowance.append(_Held(grant.slot, grant.recipients, now + grant.slot_left - margin))
        if self.daily_limit is not None:
            self.daily_used = grant.used
        self.throttles = grant.throttles
        if grant.rate is not None and self.rate is not None:
            if self.rate_in_force is not None and self.rate_in_force < self.rate <= grant.rate:
                log.info("transport %s: shared rate back to %g/s", self.name, grant.rate)
            self.rate_in_force = grant.rate
        return grant

    def _spend(self, recipients: int) -> None:
        while recipients > 0:
            held = self._allowance[0]
            used = min(recipients, held.left)
            held.left -= used
            recipients -= used
            if not held.left:
                self._allowance.popleft()

    def _window_full(self, grant: Grant) -> Outcome:
        pause = max(1.0, grant.free_in or 1.0)
        return Outcome.paused(
            f"DAILY_LIMIT of transport {self.name!r} reached: {grant.used} of {self.daily_limit} recipients in the "
            f"last {self.window:g} s; room again in {pause:.0f} s", pause)

    def throttled(self, hold_seconds: float | None) -> None:
        """A throttling reply came back: report it with the next grant; drop the slots granted at the
        old rate."""
        if self.rate is None:
            return
        self._throttle_hold = max(self._throttle_hold or 0.0, hold_seconds or 0.0)
        self._slots.clear()

    async def _report_throttle(self) -> None:
        hold = self._throttle_hold or 0.0
        throttled = await self._ledger.throttle(self.name, factor=THROTTLE_FACTOR, min_share=MIN_SHARE, hold=hold,
                                                recovery=RECOVERY_SECONDS, cooldown=THROTTLE_COOLDOWN_SECONDS)
        self._throttle_hold = None  # reported (a database error keeps it for the next grant)
        if self.rate is None:
            return
        self.rate_in_force = self.rate * throttled.share
        if throttled.lowered:
            log.warning("transport %s throttled by the provider: shared rate lowered to %.3g/s of %g/s; it climbs "
                        "back over %g s", self.name, self.rate_in_force, self.rate, RECOVERY_SECONDS)

    async def give_back(self) -> None:
        """The daemon stops: recipients granted and not used go back to the window."""
        self._unused.extend(self._allowance)
        self._allowance.clear()
        while self._unused:
            held = self._unused.popleft()
            try:
                await self._ledger.take_capacity(
                    self.name, rate=None, burst=self.burst, requests=0, horizon=0.0, daily_limit=None,
                    window=self.window, recipients=0, returned=held.left, returned_slot=held.slot,
                    recovery=RECOVERY_SECONDS)
            except DatabaseError as exc:
                log.warning("transport %s: could not give back %d unused recipients of its daily limit: %s",
                            self.name, held.left, exc)
                return


async def transport_use(limits: Mapping[str, LimitSettings], ledger: LimitStore) -> dict[str, dict[str, Any]]:
    """For ``stats``: each limited transport's rate in force, throttles, and the requests and
    recipients counted in its window, with the capacity left (every daemon's use together)."""
    if not limits:
        return {}
    rows = {r["transport"]: r for r in await ledger.transport_use(
        RECOVERY_SECONDS, {name: t.daily_window_seconds for name, t in limits.items()})}
    use = {}
    for name, t in limits.items():
        row = rows.get(name, {})
        rate, recipients = t.effective_rate_per_second, int(row.get("recipients", 0))
        use[name] = {
            "rate_per_second": rate * float(row.get("rate_share", 1.0)) if rate is not None else None,
            "configured_rate_per_second": rate,
            "throttles": int(row.get("throttles", 0)),
            "requests_granted": int(row.get("requests", 0)),
            "window_seconds": t.daily_window_seconds,
            "daily_limit": t.daily_limit,
            "daily_used": recipients,
            "daily_remaining": max(0, t.daily_limit - recipients) if t.daily_limit is not None else None,
        }
    return use
