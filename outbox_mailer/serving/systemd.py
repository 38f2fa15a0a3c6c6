"""sd_notify over the standard library: READY, STATUS, WATCHDOG, STOPPING.

systemd passes ``$NOTIFY_SOCKET`` (a path, or ``@name`` for the abstract
namespace) to a ``Type=notify`` service; each notification is one datagram of
``KEY=VALUE`` lines. ``$WATCHDOG_USEC`` asks for ``WATCHDOG=1`` at least that
often (we send at half of it), but only when ``$WATCHDOG_PID`` is unset or is
our pid. Outside systemd every method is a no-op.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

log = logging.getLogger("outbox_mailer")


class SystemdNotifier:
    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET") or None
        if address is not None and address.startswith("@"):
            address = "\0" + address[1:]
        self._address = address
        self._socket: socket.socket | None = None
        usec = env.get("WATCHDOG_USEC")
        pid = env.get("WATCHDOG_PID")
        self.watchdog_interval_seconds: float | None = None
        if usec and usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid())):
            self.watchdog_interval_seconds = int(usec) / 2 / 1_000_000

    @property
    def enabled(self) -> bool:
        return self._address is not None

    def notify(self, *assignments: str) -> bool:
        """Send one datagram; False (and a debug log line) when it could not be sent."""
        if self._address is None:
            return False
        try:
            if self._socket is None:
                self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._socket.sendto("\n".join(assignments).encode("utf-8"), self._address)
            return True
        except OSError as exc:
            log.debug("sd_notify failed: %s", exc)
            return False

    def ready(self, status: str) -> bool:
        return self.notify("READY=1", f"STATUS={status}", f"MAINPID={os.getpid()}")

    def status(self, text: str) -> bool:
        return self.notify(f"STATUS={text}")

    def watchdog(self) -> bool:
        return self.watchdog_interval_seconds is not None and self.notify("WATCHDOG=1")

    def stopping(self, status: str) -> bool:
        return self.notify("STOPPING=1", f"STATUS={status}")

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
