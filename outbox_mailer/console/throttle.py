"""Sign-in under attack: the login throttle, and the gate that bounds password checks.

* **Throttle** (:class:`LoginThrottle`), over ``THROTTLE_WINDOW_SECONDS``: from ``SLOW_AFTER`` failures
  from one client address, or of one user name from anywhere, each answer is delayed (one
  ``SLOW_SECONDS`` step per failure beyond, at most ``MAX_SLOW_STEPS``); from ``REFUSE_AFTER``
  failures from one client address, that address is refused (429) whatever it names. Failures of a
  user name from other addresses only slow its owner, never lock them out. An attempt is counted
  before its password is checked and forgiven when it succeeds, so simultaneous attempts all count.
  The client address is the real one (``clients.py``: behind a proxy, from ``X-Forwarded-For``).
* **Gate** (:class:`SignInGate`): an Argon2id check holds 64 MiB for about 0.1 s. At most
  ``SIGN_IN_CONCURRENCY`` run at once; at most ``SIGN_IN_QUEUE`` more wait; one client address has
  at most ``SIGN_IN_PER_CLIENT`` of these places. Beyond, the answer is 429 at once: memory stays
  bounded, and one client cannot take every place.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import anyio

from .auth import verify_password

THROTTLE_WINDOW_SECONDS = 900.0
SLOW_AFTER, REFUSE_AFTER = 3, 10  # failures in the window (slow: per address or user name; refuse: per address)
SLOW_SECONDS = 1.0  # one step of delay
MAX_SLOW_STEPS = 5
MAX_KEYS = 100_000  # beyond, the stale entries are forgotten


@dataclass(frozen=True, slots=True)
class Attempt:
    """A sign-in let through the throttle: its delay in steps, and when it was counted."""

    user: str
    address: str
    at: float
    slow_steps: int


@dataclass
class LoginThrottle:
    """Recent failures per client address and per user name (see the module's docstring)."""

    clock: Callable[[], float] = time.monotonic
    _failures: dict[str, deque[float]] = field(default_factory=dict)

    def _count(self, key: str, now: float) -> int:
        times = self._failures.get(key)
        if not times:
            return 0
        while times and now - times[0] > THROTTLE_WINDOW_SECONDS:
            times.popleft()
        if not times:
            del self._failures[key]
        return len(times)

    def begin(self, user: str, address: str) -> Attempt | None:
        """Count an attempt as failed until :meth:`succeeded` says otherwise; None: refused (nothing counted)."""
        now = self.clock()
        by_address, by_user = self._count("a:" + address, now), self._count("u:" + user, now)
        if by_address >= REFUSE_AFTER:
            return None
        if len(self._failures) > MAX_KEYS:
            for key in list(self._failures):
                self._count(key, now)
        for key in ("a:" + address, "u:" + user):
            self._failures.setdefault(key, deque(maxlen=REFUSE_AFTER * 2)).append(now)
        worst = max(by_address, by_user)
        return Attempt(user, address, now, min(worst - SLOW_AFTER + 1, MAX_SLOW_STEPS) if worst >= SLOW_AFTER else 0)

    def forgive(self, attempt: Attempt) -> None:
        """The attempt was not a wrong password (it was not checked at all)."""
        for key in ("a:" + attempt.address, "u:" + attempt.user):
            times = self._failures.get(key)
            if times is not None and attempt.at in times:
                times.remove(attempt.at)

    def succeeded(self, attempt: Attempt) -> None:
        """The right password: the attempt is forgiven, and the name's failures from elsewhere too."""
        self.forgive(attempt)
        self._failures.pop("u:" + attempt.user, None)


class GateFull(Exception):
    """Too many password checks wait already (or this client has its share): 429, try again soon."""


class SignInGate:
    """Bounds the password checks running and waiting (see the module's docstring)."""

    def __init__(self, concurrency: int, queue: int, per_client: int) -> None:
        self._running = anyio.Semaphore(concurrency)
        self._places, self._per_client = concurrency + queue, per_client
        self._inside = 0
        self._by_client: dict[str, int] = {}

    @contextlib.asynccontextmanager
    async def place(self, client: str) -> AsyncIterator[None]:
        """One of the places, for the block (:class:`GateFull` when none is free for ``client``)."""
        mine = self._by_client.get(client, 0)
        if self._inside >= self._places or mine >= self._per_client:
            raise GateFull
        self._inside, self._by_client[client] = self._inside + 1, mine + 1
        try:
            yield
        finally:
            self._inside -= 1
            left = self._by_client[client] - 1
            if left:
                self._by_client[client] = left
            else:
                del self._by_client[client]

    async def verify(self, client: str, stored: str | None, password: str) -> bool:
        """:func:`verify_password` when a place is free (:class:`GateFull` otherwise)."""
        async with self.place(client), self._running:
            return await verify_password(stored, password)
