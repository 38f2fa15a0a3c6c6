"""HTTP served to the outside, inside the daemon's event loop: the only module that imports uvicorn.

``async with serve_http(app, address, setting=..., exempt=...) as (host, port):`` binds ``address``
(``host:port``, ``[v6]:port``, or ``unix:PATH`` for a Unix socket, mode 0660, yielding (PATH, 0); a clear
:class:`ConfigurationError` naming ``setting`` when it cannot), serves the ASGI ``app`` with uvicorn's h11
protocol as a task of the current anyio task group, and stops it when the block ends.
What it adds to uvicorn, against hostile clients:

* **Request timeout.** A connection must deliver a whole request (request line, headers, body)
  within ``REQUEST_TIMEOUT_SECONDS`` of connecting or of its previous response, or it gets
  ``408 Request Timeout`` and is closed. uvicorn has no header-read timeout: its
  ``timeout_keep_alive`` only runs between requests and any byte cancels it, so a client
  trickling one header line every few seconds would hold its connection for ever.
* **Bounds.** At most ``MAX_CONNECTIONS`` open connections, and at most
  ``MAX_CONNECTIONS_PER_CLIENT`` of them from one client (an IPv4 address, an IPv6 /64), so
  that one client cannot hold them all; more are closed as they arrive. A reverse proxy speaks
  for many clients: addresses in ``exempt`` (loopback by default) are held to the overall bound
  only. A request head (request line and headers, up to the blank line) of at most
  ``MAX_HEAD_BYTES``, counted on the bytes received, whatever chunks they come in (400 beyond);
  one request in progress per connection (h11 pauses pipelined ones).
* **Shutdown that waits for no client.** Leaving the block closes the port, closes idle and
  half-sent connections at once, gives requests being answered ``SHUTDOWN_GRACE_SECONDS``,
  then aborts whatever remains.
* **Signals stay the daemon's.** ``uvicorn.Server.serve()`` installs its own SIGINT/SIGTERM
  handlers (``capture_signals``, no switch to turn it off in uvicorn 0.29+); here it is a no-op,
  because the daemon receives its signals through anyio and stops this server itself.
* **Logs are the project's.** No logging configuration of uvicorn's own (``log_config=None``):
  ``uvicorn.error`` and ``uvicorn.access`` propagate to the root handler the CLI set up; their
  lines below ERROR (start-up banner, one access line per request, "invalid HTTP request") are
  demoted to DEBUG. A client that goes away mid-request is not an error and prints nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import re
import socket
import stat
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import anyio
import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..errors import ConfigurationError
from ..settings.checks import Network, parse_listen_address

log = logging.getLogger("outbox_mailer")

REQUEST_TIMEOUT_SECONDS = 5  # to send a whole request, from connecting or from the previous response
MAX_CONNECTIONS = 64  # open at once; a scraper and a few probes need a handful
MAX_CONNECTIONS_PER_CLIENT = 8  # open at once from one client address (an IPv6 /64), exempt addresses aside
MAX_HEAD_BYTES = 16 * 1024  # request line and headers
SHUTDOWN_GRACE_SECONDS = 1  # for responses being written when the server stops
SERVER_HEADER = "outbox-mailer"
UNIX_PREFIX = "unix:"  # an address "unix:/run/x.sock": a Unix socket at that path
FULL_WARNING_EVERY_SECONDS = 60.0

Asgi = Any  # an ASGI 3 application (starlette.applications.Starlette, for one)
LOOPBACK: tuple[Network, ...] = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))
_HEAD_END = re.compile(rb"\n\r?\n")  # where h11 ends a request head


@contextlib.asynccontextmanager
async def serve_http(app: Asgi, address: str, *, setting: str,
                     exempt: Sequence[Network] = LOOPBACK) -> AsyncIterator[tuple[str, int]]:
    """Serve ``app`` on ``address`` while the block runs; yields the bound (host, port).

    ``exempt``: the addresses of reverse proxies, whose connections are not held to the per-client bound.
    """
    sock = _bind(address, setting)
    name = sock.getsockname()
    host, port = (name, 0) if isinstance(name, str) else name[:2]  # a Unix socket: its path, port 0
    server = _Server(_config(app, tuple(exempt)))
    stopped = anyio.Event()

    async def run() -> None:
        try:
            await server.serve(sockets=[sock])
        finally:
            stopped.set()

    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(run)
            await server.ready.wait()
            try:
                yield host, port
            finally:
                server.should_exit = True  # uvicorn's main loop looks every 0.1 s
                with anyio.CancelScope(shield=True), anyio.move_on_after(SHUTDOWN_GRACE_SECONDS + 1):
                    await stopped.wait()
                tasks.cancel_scope.cancel()
    finally:
        server.close_everything()
        sock.close()
        if isinstance(name, str):
            with contextlib.suppress(OSError):
                os.unlink(name)


def _bind(address: str, setting: str) -> socket.socket:
    if address.startswith(UNIX_PREFIX):
        return _bind_unix(address[len(UNIX_PREFIX):], setting)
    host, port = parse_listen_address(address)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigurationError(f"{setting}={address}: cannot listen there: {exc.strerror or exc}",
                                 setting=setting) from exc
    return sock


def _bind_unix(path: str, setting: str) -> socket.socket:
    """A Unix socket at ``path`` (one left by a previous run is replaced), mode 0660: the owner and
    its group (the proxy's) may connect, nobody else."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(os.stat(path).st_mode):
                os.unlink(path)
        sock.bind(path)
        os.chmod(path, 0o660)
    except OSError as exc:
        sock.close()
        raise ConfigurationError(f"{setting}={path}: cannot listen there: {exc.strerror or exc}",
                                 setting=setting) from exc
    return sock


def _config(app: Asgi, exempt: tuple[Network, ...]) -> uvicorn.Config:
    _route_uvicorn_logs()

    class Protocol(_GuardedH11Protocol):
        exempt_networks = exempt

    return uvicorn.Config(
        app, http=Protocol, ws="none", lifespan="off", interface="asgi3",
        log_config=None, access_log=True, proxy_headers=False,
        server_header=False, headers=[("server", SERVER_HEADER)],
        timeout_keep_alive=REQUEST_TIMEOUT_SECONDS, timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
    )


class _Server(uvicorn.Server):
    """uvicorn's server without its signal handlers, with a start-up event and a last-resort close."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = anyio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # SIGTERM/SIGINT belong to the daemon (anyio's signal receiver), which sets should_exit

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.ready.set()

    def close_everything(self) -> None:
        """Close the listeners and abort every connection still open (after the graceful part)."""
        for listener in getattr(self, "servers", []):
            listener.close()
        for connection in list(self.server_state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None and not transport.is_closing():
                transport.abort()
        for task in list(self.server_state.tasks):
            task.cancel()


class _GuardedH11Protocol(H11Protocol):
    """h11 with a deadline for each request, a bound on the request head, caps on open connections."""

    exempt_networks: tuple[Network, ...] = LOOPBACK
    _last_full_warning = -FULL_WARNING_EVERY_SECONDS
    _deadline: asyncio.TimerHandle | None = None
    _client_key: object = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # as uvicorn's own
        full = len(self.connections) >= MAX_CONNECTIONS
        super().connection_made(transport)
        self._client_key = _client_key(self.client, self.exempt_networks)
        if full or self._client_full():
            _GuardedH11Protocol._warn_full(full, self.client)
            transport.close()
            return
        self._arm()

    def _client_full(self) -> bool:
        if self._client_key is None:
            return False
        same = sum(1 for other in self.connections
                   if other is not self and getattr(other, "_client_key", None) == self._client_key)
        return same >= MAX_CONNECTIONS_PER_CLIENT

    def handle_events(self) -> None:
        if self.conn.their_state is h11.IDLE and self._head_too_large():
            self.send_400_response("Request head too large.")
            return
        super().handle_events()

    def _head_too_large(self) -> bool:
        """Whether the request head being received is over MAX_HEAD_BYTES (h11 bounds only an incomplete one)."""
        buffered, _ = self.conn.trailing_data
        return len(buffered) > MAX_HEAD_BYTES and _HEAD_END.search(buffered, 0, MAX_HEAD_BYTES) is None

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()  # the next request on this connection gets its own REQUEST_TIMEOUT_SECONDS

    def _arm(self) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self._deadline = self.loop.call_later(REQUEST_TIMEOUT_SECONDS, self._request_timed_out)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _request_timed_out(self) -> None:
        self._deadline = None
        if self.transport.is_closing() or self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):
            return  # closed already, or the request is complete and being answered
        if self.conn.our_state is h11.IDLE and self.conn.their_state is h11.IDLE:
            try:
                head = self.conn.send(h11.Response(status_code=408, reason=b"Request Timeout",
                                                   headers=[(b"connection", b"close"), (b"content-length", b"0")]))
                self.transport.write((head or b"") + (self.conn.send(h11.EndOfMessage()) or b""))
            except h11.LocalProtocolError:
                pass  # h11 would not have it in this state: just close
        log.debug("http: closed a connection from %s that sent no complete request in %ds",
                  _peer(self.client), REQUEST_TIMEOUT_SECONDS)
        self.transport.close()

    @staticmethod
    def _warn_full(everyone: bool, client: tuple[str, int] | None) -> None:
        now = time.monotonic()
        if now - _GuardedH11Protocol._last_full_warning >= FULL_WARNING_EVERY_SECONDS:
            _GuardedH11Protocol._last_full_warning = now
            held = f"{MAX_CONNECTIONS} connections open" if everyone else \
                f"{MAX_CONNECTIONS_PER_CLIENT} connections open from {client[0] if client else '?'}"
            log.warning("http: %s, refusing more (they close after %ds without a request)", held,
                        REQUEST_TIMEOUT_SECONDS)


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "?"


def _client_key(client: tuple[str, int] | None, exempt: tuple[Network, ...]) -> object:
    """What the per-client bound counts connections by: the IPv4 address, or the IPv6 /64 (one
    subscriber's usual share); None for a client held to the overall bound only (exempt, or unknown)."""
    if client is None:
        return None
    try:
        address = ipaddress.ip_address(client[0].split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if any(address in network for network in exempt):
        return None
    if isinstance(address, ipaddress.IPv6Address):
        return ipaddress.IPv6Network((address, 64), strict=False)
    return address


class _DemoteChatter(logging.Filter):
    """uvicorn's lines below ERROR become DEBUG lines, shown only when the project logs at DEBUG.

    They are the start-up banner, shutdown steps, one access line per request, and warnings any
    client can cause at will ("Invalid HTTP request received."): not worth an operator's attention.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger("outbox_mailer").isEnabledFor(logging.DEBUG)
        return True


_DEMOTE = _DemoteChatter()


def _route_uvicorn_logs() -> None:
    for name in ("uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        if _DEMOTE not in logger.filters:
            logger.addFilter(_DEMOTE)
