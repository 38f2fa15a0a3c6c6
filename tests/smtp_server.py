"""A real SMTP server for tests: aiosmtpd on 127.0.0.1 with scripted faults.

Start one with the context manager (or the ``smtp_server`` pytest fixture,
which yields the same object)::

    from tests.smtp_server import running_smtp_server

    with running_smtp_server() as server:       # listens on server.host:server.port
        server.fail("RCPT", "550 5.1.1 no such user", address="bad@example.com")
        server.fail("MAIL", "421 4.3.2 busy", times=1)   # first MAIL only, then normal
        server.drop("DATA")          # read the whole message, close without replying
        server.drop("RCPT")          # close on RCPT: nothing received
        server.delay("DATA", 1.0)    # normal reply, one second late
        server.fail("MAIL", "451 4.3.0 later", probability=0.1)  # ~10% of MAILs
        ...
        server.messages              # every complete message body the server read
        server.accepted              # ... the ones it answered 2xx
        server.connections, server.max_concurrent, server.commands

Faults apply to ``MAIL``, ``RCPT`` (optionally one ``address``) and ``DATA``
(after the message body was read). A fault's ``reply`` is any ``"CODE text"``
line; a 2xx reply accepts as usual with that text (e.g. ``"250 2.0.0 Ok:
queued as 4ABC12"``). Faults are matched in the order added; ``times=N``
limits one to the first N matching commands; ``probability=p`` applies one
to a random share ``p`` of the matching commands (``server.rng`` is a seedable
``random.Random``; a skipped draw does not use up ``times``).
``disconnect_all()`` closes every open connection from the server side (a
server dropping idle clients).

Outages: ``server.stop()`` stops listening and closes every connection (the
port then refuses connections); ``server.stop(finish_transactions=True)``
closes idle connections at once and busy ones right after the reply that ends
their mail transaction (a server shutting down cleanly: no message is cut in
half). ``server.start()`` listens again on the same port, keeping the faults
and everything recorded so far.
``running_smtp_server(port=N)`` listens on a chosen port.

PIPELINING (RFC 2920): ``running_smtp_server(pipelining=True)`` (or setting
``server.pipelining = True`` before the client's EHLO) adds ``250-PIPELINING``
to the EHLO reply. aiosmtpd reads commands line by line whatever it
advertises, so pipelined input works either way. ``server.queued_input``
tells whether a client pipelined: for each command logged in ``commands``,
the bytes the server had already received after that command's line when it
handled it (a client that waits for each reply leaves nothing there; for
DATA it is what followed the end of the message).

Recipient limit (Postfix's ``smtpd_recipient_limit``): ``server.recipient_limit = N``
(or ``running_smtp_server(recipient_limit=N)``) answers ``452 4.5.3 Too many
recipients`` to every RCPT of a transaction that already has N accepted
recipients; the limit is checked before the faults (a fault for an address
refused by the limit is not used up).

``server.received_by_header("X-Test-Key")`` counts the messages read per value
of a header (``accepted_only=True``: only those answered 2xx).

Keyword arguments of ``running_smtp_server`` go to aiosmtpd's ``Controller``
and ``SMTP`` (``tls_context=`` to offer STARTTLS, ``ssl_context=`` for
implicit TLS, ``authenticator=``/``auth_require_tls=`` for AUTH).
``make_self_signed_cert`` writes a certificate for 127.0.0.1 with openssl.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from email.parser import BytesHeaderParser
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP

__all__ = [
    "Fault",
    "ReceivedMessage",
    "SmtpTestServer",
    "free_port",
    "make_self_signed_cert",
    "running_smtp_server",
    "smtp_server",
]

HOST = "127.0.0.1"
COMMANDS = frozenset({"MAIL", "RCPT", "DATA"})


@dataclass
class Fault:
    command: str  # MAIL, RCPT or DATA
    reply: str | None = None  # "CODE text"; None: the normal reply
    delay: float = 0.0  # seconds to wait before replying (or dropping)
    drop: bool = False  # close the connection instead of replying
    address: str | None = None  # MAIL/RCPT: only for this address
    times: int | None = None  # only the first N matching commands; None: always
    probability: float = 1.0  # share of the matching commands it applies to (drawn per command)
    hold: threading.Event | None = None  # reply only once the test sets it (at most 30 s)


@dataclass(frozen=True)
class ReceivedMessage:
    mail_from: str
    rcpt_tos: tuple[str, ...]
    data: bytes  # as received, dot-unstuffed, CRLF line endings
    reply: str | None  # what the server answered; None: dropped without reply
    connection: int  # 1-based number of the connection it came on
    tls: bool  # the session was encrypted

    @property
    def accepted(self) -> bool:
        return self.reply is not None and self.reply.startswith("2")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def make_self_signed_cert(directory: Path) -> tuple[Path, Path]:
    """A certificate (and key) valid for 127.0.0.1 and localhost; returns (cert, key)."""
    cert, key = directory / "smtp-cert.pem", directory / "smtp-key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


class SmtpTestServer:
    """State shared with the server thread; every public method is thread-safe."""

    def __init__(self) -> None:
        self.host = HOST
        self.port = 0
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self._messages: list[ReceivedMessage] = []
        self._commands: list[tuple[int, str, str]] = []
        self._queued: list[tuple[int, str, bytes]] = []
        self.pipelining = False  # advertise PIPELINING in the EHLO reply
        self.recipient_limit: int | None = None  # accepted RCPTs per transaction; more get 452 4.5.3
        self._open: set[_RecordingSMTP] = set()
        self._connections = 0
        self._max_concurrent = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._controller: _Controller | None = None
        self._controller_kwargs: dict[str, Any] = {}
        self._header_cache: dict[str, list[str | None]] = {}
        self.rng = random.Random()
        self._closing = False

    # -- scripting --------------------------------------------------------

    def script(self, command: str, **kw: Any) -> Fault:
        command = command.upper()
        if command not in COMMANDS:
            raise ValueError(f"faults apply to {sorted(COMMANDS)}, not {command!r}")
        fault = Fault(command, **kw)
        with self._lock:
            self._faults.append(fault)
        return fault

    def fail(self, command: str, reply: str, **kw: Any) -> Fault:
        """Answer ``command`` with ``reply`` (e.g. ``"451 4.3.0 try later"``)."""
        return self.script(command, reply=reply, **kw)

    def drop(self, command: str, **kw: Any) -> Fault:
        """Close the connection on ``command`` without replying."""
        return self.script(command, drop=True, **kw)

    def delay(self, command: str, seconds: float, **kw: Any) -> Fault:
        """Reply to ``command`` only after ``seconds``."""
        return self.script(command, delay=seconds, **kw)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def disconnect_all(self, timeout: float = 2.0) -> None:
        """Close every open connection from the server side and wait until they are gone."""
        assert self._loop is not None
        with self._lock:
            servers = list(self._open)
        for srv in servers:
            if srv.transport is not None:
                self._loop.call_soon_threadsafe(srv.transport.close)
        self.wait_until(lambda: not self.open_connections, timeout)

    # -- outages ------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._controller is not None

    def stop(self, timeout: float = 5.0, *, finish_transactions: bool = False) -> None:
        """Stop listening and close every open connection; the port refuses connections until start().

        ``finish_transactions``: close idle connections now and the others once their
        current mail transaction has been answered (any still open after ``timeout``
        are closed anyway).
        """
        controller = self._controller
        if controller is None:
            return
        loop = self._loop
        assert loop is not None
        server = controller.server
        if server is not None:
            loop.call_soon_threadsafe(server.close)  # closes the listening socket at once
        if finish_transactions:
            self._closing = True
            loop.call_soon_threadsafe(self._close_idle)
            self.wait_until(lambda: not self.open_connections, timeout)
        with self._lock:
            servers = list(self._open)
        for srv in servers:
            if srv.transport is not None:
                loop.call_soon_threadsafe(srv.transport.close)
        self.wait_until(lambda: not self.open_connections, timeout)
        controller.stop()
        self._controller = None
        self._closing = False
        with self._lock:
            self._open.clear()

    def _close_idle(self) -> None:
        """In the server thread: close the connections not inside a mail transaction."""
        with self._lock:
            servers = list(self._open)
        for srv in servers:
            envelope = srv.envelope
            if srv.transport is not None and (envelope is None or envelope.mail_from is None):
                srv.transport.close()

    def _close_after_reply(self, srv: _RecordingSMTP) -> None:
        """When closing: close ``srv`` right after the reply being sent (the handler has not yielded yet)."""
        if self._closing and srv.transport is not None:
            asyncio.get_running_loop().call_soon(srv.transport.close)

    def start(self) -> None:
        """Listen again on the same port (after stop()), keeping faults and records."""
        if self._controller is not None:
            return
        with self._lock:
            connections, max_concurrent = self._connections, self._max_concurrent
        self._start(self.port)
        # forget the readiness probe of the new controller
        self.wait_until(lambda: not self.open_connections)
        with self._lock:
            self._connections = connections + max(0, self._connections - connections - 1)
            self._max_concurrent = max_concurrent

    def _start(self, port: int) -> None:
        controller = _Controller(_Handler(self), hostname=HOST, port=port, **self._controller_kwargs)
        try:
            controller.start()
        except BaseException:
            with contextlib.suppress(Exception):
                controller.stop(no_assert=True)
            raise
        self._controller, self.port, self._loop = controller, port, controller.loop

    # -- what happened ----------------------------------------------------

    @property
    def messages(self) -> list[ReceivedMessage]:
        with self._lock:
            return list(self._messages)

    @property
    def accepted(self) -> list[ReceivedMessage]:
        return [m for m in self.messages if m.accepted]

    @property
    def commands(self) -> list[tuple[int, str, str]]:
        """(connection number, verb, argument) for each MAIL, RCPT, DATA, RSET, QUIT."""
        with self._lock:
            return list(self._commands)

    @property
    def queued_input(self) -> list[tuple[int, str, bytes]]:
        """(connection number, verb, input already received after it) for each entry of ``commands``."""
        with self._lock:
            return list(self._queued)

    def verbs(self) -> list[str]:
        return [verb for _, verb, _ in self.commands]

    @property
    def connections(self) -> int:
        """Connections accepted so far (the readiness probe excluded)."""
        with self._lock:
            return self._connections

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._open)

    @property
    def max_concurrent(self) -> int:
        with self._lock:
            return self._max_concurrent

    def received_by_header(self, name: str, *, accepted_only: bool = False) -> Counter[str]:
        """How many messages the server read per value of header ``name`` (absent: not counted)."""
        messages = self.messages
        with self._lock:
            values = self._header_cache.setdefault(name.lower(), [])
        parser = BytesHeaderParser()
        for message in messages[len(values):]:
            value = parser.parsebytes(message.data, headersonly=True).get(name)
            values.append(None if value is None else str(value).strip())
        counts: Counter[str] = Counter()
        for message, value in zip(messages, values, strict=False):
            if value is not None and (message.accepted or not accepted_only):
                counts[value] += 1
        return counts

    def wait_until(self, predicate: Any, timeout: float = 2.0) -> bool:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    # -- called from the server thread ------------------------------------

    def _take(self, command: str, address: str | None) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.command != command:
                    continue
                if fault.address is not None and fault.address != address:
                    continue
                if fault.probability < 1.0 and self.rng.random() >= fault.probability:
                    continue
                if fault.times is not None:
                    if fault.times <= 0:
                        continue
                    fault.times -= 1
                return fault
        return None

    def _log(self, srv: _RecordingSMTP, verb: str, arg: str = "") -> None:
        reader = getattr(srv, "_reader", None)
        queued = bytes(getattr(reader, "_buffer", b""))
        with self._lock:
            self._commands.append((srv.number, verb, arg))
            self._queued.append((srv.number, verb, queued))

    def _record(self, message: ReceivedMessage) -> None:
        with self._lock:
            self._messages.append(message)

    def _opened(self, srv: _RecordingSMTP) -> int:
        with self._lock:
            self._connections += 1
            self._open.add(srv)
            self._max_concurrent = max(self._max_concurrent, len(self._open))
            return self._connections

    def _closed(self, srv: _RecordingSMTP) -> None:
        with self._lock:
            self._open.discard(srv)

    def _reset_counters(self) -> None:
        with self._lock:
            self._connections = 0
            self._max_concurrent = 0
            self._commands.clear()
            self._queued.clear()


async def _act(fault: Fault | None, srv: SMTP) -> str | None:
    """Apply a fault's delay and drop; return its reply (None: the normal one)."""
    if fault is None:
        return None
    if fault.delay:
        await asyncio.sleep(fault.delay)
    if fault.hold is not None:
        await asyncio.get_running_loop().run_in_executor(None, fault.hold.wait, 30.0)
    if fault.drop:
        assert srv.transport is not None
        srv.transport.close()
        await asyncio.Event().wait()  # cancelled by connection_lost
    return fault.reply


class _Handler:
    def __init__(self, owner: SmtpTestServer) -> None:
        self.owner = owner

    async def handle_EHLO(self, srv, session, envelope, hostname, responses):
        session.host_name = hostname  # what aiosmtpd does itself when there is no EHLO hook
        if self.owner.pipelining:
            responses.insert(len(responses) - 1, "250-PIPELINING")  # before the final "250 HELP"
        return responses

    async def handle_MAIL(self, srv, session, envelope, address, mail_options):
        self.owner._log(srv, "MAIL", address)
        if self.owner._closing:  # shutting down: no new transaction
            await _act(Fault("MAIL", drop=True), srv)
        reply = await _act(self.owner._take("MAIL", address), srv)
        if reply is None or reply.startswith("2"):
            envelope.mail_from = address
            envelope.mail_options.extend(mail_options)
        return reply or "250 OK"

    async def handle_RCPT(self, srv, session, envelope, address, rcpt_options):
        self.owner._log(srv, "RCPT", address)
        limit = self.owner.recipient_limit
        if limit is not None and len(envelope.rcpt_tos) >= limit:
            return "452 4.5.3 Too many recipients"
        reply = await _act(self.owner._take("RCPT", address), srv)
        if reply is None or reply.startswith("2"):
            envelope.rcpt_tos.append(address)
            envelope.rcpt_options.extend(rcpt_options)
        return reply or "250 OK"

    async def handle_DATA(self, srv, session, envelope):
        self.owner._log(srv, "DATA")
        fault = self.owner._take("DATA", None)
        reply = None if fault is not None and fault.drop else (fault and fault.reply) or "250 OK"
        self.owner._record(
            ReceivedMessage(
                mail_from=envelope.mail_from,
                rcpt_tos=tuple(envelope.rcpt_tos),
                data=bytes(envelope.original_content),
                reply=reply,
                connection=srv.number,
                tls=session.ssl is not None,
            )
        )
        await _act(fault, srv)
        self.owner._close_after_reply(srv)
        return reply

    async def handle_RSET(self, srv, session, envelope):
        self.owner._log(srv, "RSET")
        self.owner._close_after_reply(srv)
        return "250 OK"

    async def handle_QUIT(self, srv, session, envelope):
        self.owner._log(srv, "QUIT")
        return "221 Bye"


class _RecordingSMTP(SMTP):
    def __init__(self, handler: _Handler, **kw: Any) -> None:
        super().__init__(handler, **kw)
        self.owner = handler.owner
        self.number = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        first = self.transport is None  # not the STARTTLS upgrade of the same connection
        super().connection_made(transport)
        if first:
            self.number = self.owner._opened(self)

    def connection_lost(self, error: Exception | None) -> None:
        self.owner._closed(self)
        super().connection_lost(error)


class _Controller(Controller):
    def factory(self) -> SMTP:
        return _RecordingSMTP(self.handler, **self.SMTP_kwargs)


@contextlib.contextmanager
def running_smtp_server(
    port: int | None = None, *, pipelining: bool = False, recipient_limit: int | None = None, **kwargs: Any
) -> Iterator[SmtpTestServer]:
    """Start aiosmtpd on 127.0.0.1 and ``port`` (default: a free one); stop it on exit.

    ``pipelining``: advertise PIPELINING in the EHLO reply; ``recipient_limit``:
    accepted recipients per transaction, more are answered 452 4.5.3.
    """
    state = SmtpTestServer()
    state.pipelining = pipelining
    state.recipient_limit = recipient_limit
    kwargs.setdefault("server_hostname", "smtp.example.com")
    kwargs.setdefault("ready_timeout", 5.0)
    state._controller_kwargs = kwargs
    if port is not None:
        state._start(port)
    else:
        for _ in range(5):  # the port may be taken between free_port() and bind
            try:
                state._start(free_port())
            except (OSError, RuntimeError, TimeoutError):
                continue
            break
    if state._controller is None:
        raise RuntimeError("could not start the test SMTP server")
    # Forget the controller's readiness probe connection.
    state.wait_until(lambda: not state.open_connections)
    state._reset_counters()
    try:
        yield state
    finally:
        state.stop()


@pytest.fixture
def smtp_server() -> Iterator[SmtpTestServer]:
    with running_smtp_server() as server:
        yield server
