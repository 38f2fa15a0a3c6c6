"""Transport pauses shared through the database (sql/0024_transport_pauses.sql): what every daemon learns
of them, and what it tells.

About once a second (:data:`POLL_SECONDS`), on the LISTEN session it already holds, a daemon

* publishes the pause of each circuit breaker that opened since (one row per transport and source,
  ``breaker:<worker>``, until the pause's end), so that the console shows every paused transport;
* reads, for each of its transports, the operator's pause in force and the latest resume, and hands
  both to the transport's gate (:meth:`TransportGate.read_pause`): an operator's pause becomes part of
  the gate's one answer to "is it paused"; a resume later than this daemon's published breaker pause
  closes the breaker.

So a pause or a resume reaches every daemon within about a second. While the database cannot be read,
each gate keeps what it read last.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Protocol

import anyio

from ..clock import monotonic
from ..errors import DatabaseError
from ..store.pauses import PauseState
from .gate import TransportGate

log = logging.getLogger("outbox_mailer")

POLL_SECONDS = 1.0


class PauseBoard(Protocol):
    """Where pauses are read and published (DaemonSessions, on its LISTEN session). Both raise DatabaseError."""

    async def pauses(self, transports: Sequence[str]) -> list[PauseState]: ...

    async def publish_breaker_pause(self, transport: str, paused_by: str, reason: str,
                                    seconds: float) -> datetime: ...


class PauseWatch:
    def __init__(self, gates: Mapping[str, TransportGate], board: PauseBoard, worker: str, *,
                 clock: Callable[[], float] = monotonic) -> None:
        self._gates = gates
        self._board = board
        self._by = f"breaker:{worker}"
        self._clock = clock
        self._failing = False  # one line per outage, not one per turn

    async def run(self, stopping: anyio.Event) -> None:
        """A turn every POLL_SECONDS until stopped."""
        while not stopping.is_set():
            await self.turn()
            with anyio.move_on_after(POLL_SECONDS):
                await stopping.wait()

    async def turn(self) -> None:
        """Publish the breakers that opened, then read every transport's pause."""
        try:
            for gate in self._gates.values():
                await self._publish(gate)
            states = await self._board.pauses(list(self._gates))
        except DatabaseError as exc:
            if not self._failing:
                log.warning("transport pauses not read (%s); each transport keeps what was read last", exc)
            self._failing = True
            return
        self._failing = False
        now = self._clock()
        for state in states:
            self._gates[state.transport].read_pause(state, now)

    async def _publish(self, gate: TransportGate) -> None:
        opened = gate.opened
        if opened is None:
            return
        until, why = opened
        seconds = until - self._clock()
        if seconds > 0:
            gate.published_at = await self._board.publish_breaker_pause(gate.name, self._by, why, seconds)
        if gate.opened is opened:  # not opened again meanwhile
            gate.opened = None
