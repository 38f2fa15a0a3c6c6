"""The daemon's pulse: watchdog pings and status lines for systemd, and health for /healthz.

The claim loop (and the drain loop) call :meth:`Liveness.beat` on every turn,
so ``WATCHDOG=1`` is sent only while the loop actually turns: a wedged loop
stops the pings and systemd kills it. Nothing here runs on a timer of its own.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable

import anyio

from ..errors import DatabaseError
from ..serving.systemd import SystemdNotifier
from ..store import ClaimSession

log = logging.getLogger("outbox_mailer")

STATUS_EVERY_SECONDS = 5.0


class Liveness:
    def __init__(self, notifier: SystemdNotifier, status_line: Callable[[int | None], str],
                 wedge_file: str | None = None) -> None:
        self.notifier = notifier
        self._status_line = status_line  # pending count (or None) -> "sent 3, failed 0, ..."
        self._wedge_file = wedge_file
        self._last_ping = self._last_status = -math.inf
        self.last_turn = -math.inf  # the loop's last turn (health)
        self.pending: int | None = None

    @property
    def interval(self) -> float:
        """Longest the loop may wait between turns (infinite outside a watchdog)."""
        return self.notifier.watchdog_interval_seconds or math.inf

    def status(self) -> str:
        return self._status_line(self.pending)

    def beat(self) -> None:
        now = self.last_turn = anyio.current_time()
        interval = self.notifier.watchdog_interval_seconds
        if interval is not None and now - self._last_ping >= interval * 0.9:
            self.notifier.watchdog()
            self._last_ping = now
        if now - self._last_status >= STATUS_EVERY_SECONDS:
            self.notifier.status(self.status())
            self._last_status = now

    async def beat_or_wedge(self) -> None:
        if self._wedge_file and os.path.exists(self._wedge_file):
            log.error("debug_wedge_file %s exists: the claim loop stops (a watchdog drill)",
                      self._wedge_file)
            await anyio.sleep_forever()
        self.beat()

    async def refresh_pending(self, session: ClaimSession) -> None:
        """Count pending rows for the status line, at most every STATUS_EVERY_SECONDS."""
        if not self.notifier.enabled or anyio.current_time() - self._last_status < STATUS_EVERY_SECONDS:
            return
        try:
            self.pending = await session.count_pending()
        except DatabaseError:
            self.pending = None
