"""A loopback TCP proxy whose connections can go silent: they stay open, the kernel keeps
ACKing, but nothing more is forwarded either way. That is what a connection through a NAT or a
firewall that lost its state looks like to both ends; keepalives between one end and the proxy
are answered, so only timeouts above TCP can notice.

    with StallingProxy("127.0.0.1", pg_port) as proxy:
        url = f"postgresql://.../db?port={proxy.port}"
        ...
        proxy.stall()        # every connection open now goes silent; new ones forward normally
        proxy.stall(newest=1)  # only the forwarded connection accepted last
        proxy.hold_new()     # from now on, connections are accepted and never forwarded (a host gone silent)
"""

from __future__ import annotations

import contextlib
import functools
from concurrent.futures import Future
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import SocketAttribute, SocketStream
from anyio.from_thread import BlockingPortal, start_blocking_portal


class _Pair:
    def __init__(self) -> None:
        self.stalled = anyio.Event()


class StallingProxy:
    """Runs in a thread of its own (an anyio blocking portal), like tests/smtp_server.py, so that
    it outlives the test's own tasks in any order."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._pairs: list[_Pair] = []
        self._portal_cm: Any = None
        self._portal: BlockingPortal | None = None
        self._serving: Future[None] | None = None
        self.port = 0
        self.accepted = 0  # connections accepted so far
        self._holding = False

    def stall(self, *, newest: int | None = None) -> int:
        """Silence every connection open now, or only those among the ``newest`` forwarded ones (in the
        order accepted); returns how many."""
        assert self._portal is not None
        return self._portal.call(self._stall, newest)

    def hold_new(self) -> None:
        """From now on, accept connections but forward nothing on them: they stay open and silent."""
        self._holding = True

    async def _stall(self, newest: int | None) -> int:
        pairs = self._pairs if newest is None else self._pairs[len(self._pairs) - newest:]
        live = [p for p in pairs if not p.stalled.is_set()]
        for pair in live:
            pair.stalled.set()
        return len(live)

    def __enter__(self) -> StallingProxy:
        self._portal_cm = start_blocking_portal()
        self._portal = self._portal_cm.__enter__()
        listener = self._portal.call(functools.partial(anyio.create_tcp_listener, local_host="127.0.0.1"))
        self.port = listener.extra(SocketAttribute.local_port)
        self._serving = self._portal.start_task_soon(listener.serve, self._serve)
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        assert self._serving is not None
        self._serving.cancel()
        self._portal_cm.__exit__(None, None, None)

    async def _serve(self, client: SocketStream) -> None:
        self.accepted += 1
        if self._holding:
            async with client:
                await anyio.sleep_forever()
        pair = _Pair()
        self._pairs.append(pair)
        try:
            async with client, await anyio.connect_tcp(*self._target) as server, anyio.create_task_group() as tg:
                tg.start_soon(self._pump, client, server, pair)
                tg.start_soon(self._pump, server, client, pair)
        except Exception:  # the target is down, a side closed: this pair ends, the proxy serves on
            pass

    @staticmethod
    async def _pump(source: SocketStream, sink: SocketStream, pair: _Pair) -> None:
        try:
            while not pair.stalled.is_set():
                chunk = b""
                with anyio.move_on_after(0.05):  # look at the flag between reads
                    chunk = await source.receive()
                if pair.stalled.is_set():
                    break
                if chunk:
                    await sink.send(chunk)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            with contextlib.suppress(Exception):
                await sink.aclose()  # a close passes through while the pair is live
            return
        await anyio.sleep_forever()  # silent: nothing read, nothing sent, nothing closed
