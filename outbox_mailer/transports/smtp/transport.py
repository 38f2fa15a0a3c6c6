"""SMTP transport over a pool of persistent aiosmtplib connections.

This module and :mod:`.attempt` are the only importers of aiosmtplib.
aiosmtplib sets every session up; a send then runs the phases itself (MAIL,
one RCPT per recipient, DATA; pipelined in one write when the server offers
PIPELINING, see :mod:`.attempt`) so that it knows where a failure
happened, which is what decides the outcome:

* a reply refusing MAIL/RCPT/DATA: not sent; 4xx (421 too) transient, 5xx
  permanent, classified by the reply code (never by exception class); when a
  pipelined MAIL is refused, its reply decides (the RCPT/DATA replies after it
  are consequences);
* some recipients refused: sent to the others, the refused ones recorded; all
  refused: not sent;
* a timeout or lost connection before the message body was sent: not sent,
  transient (an idle pooled connection found closed at MAIL is retried once
  on a new one);
* a timeout or lost connection once the body may have been sent: ambiguous
  (the server may have accepted the message). Pipelined, that is once the
  body was written after 354; one command at a time, anywhere inside DATA;
* 250 after the message body: sent;
* recipients refused with 452 (too many recipients): sent in further
  transactions on the same connection within the attempt, see
  :mod:`.attempt`;
* a refusal about our account rather than the message (530 authentication
  required, relaying denied; the exact rule is in :mod:`.replies`):
  ``Outcome.paused`` (not charged; the transport is paused for
  ``pause_seconds``, like refused credentials of an API transport); the
  daemon's gate logs the pause with the reply.

After a refusal (other than 421) RSET keeps the connection usable.

With bounce tags on (``bounces``, :mod:`outbox_mailer.delivery_events.bounce_tags`) the envelope sender is the
tagged bounce address: of the whole message (index 0), or, with ``per_recipient``, of each
recipient, in one transaction per recipient on the same connection (each its own MAIL FROM; the
send timeout bounds them all). Their outcomes make one (:func:`.replies.each_recipient`): sent when
anyone got it, the others refused with their own transaction's reason, so a retry (the row's
``retry_recipients``) goes to them alone.

With DKIM on (``signer``, :mod:`outbox_mailer.message.dkim_signing`) :meth:`send` signs the message once,
before anything goes out; a message that cannot be signed, or is over the size limit once signed,
is unsendable (nothing was sent).

Failures while setting a session up (connect, greeting, EHLO, STARTTLS,
AUTH) are the server's or the configuration's, not the message's: the
outcome is ``Outcome.unreachable`` (not charged), and :meth:`check`
raises :class:`~outbox_mailer.errors.TransportUnavailable` for them.

:meth:`check` then probes the account without sending anything: ``MAIL
FROM:<probe sender>``, ``RCPT TO:<outbox-mailer-check@example.com>`` (an
RFC 2606 domain: ``example.net`` when the sender is at ``example.com``, so
that the recipient is never at the sender's domain and a relay that wants
AUTH shows it by refusing to relay), then ``RSET``; never DATA. A refusal
about our account (see above) or a lost connection raises
TransportUnavailable; any other refusal (an unknown probe recipient, a
temporary 4xx) is only reported in the returned line. The probe sender is
the ``probe_sender`` given to the constructor (the daemon passes the
configured default sender), else ``postmaster@<helo name>``.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass, replace

import anyio
from aiosmtplib import SMTP, SMTPHeloError, SMTPResponseException

from ...clock import utc_now
from ...delivery import Cause, ComposedMessage, Delivery, Outcome, idempotency_key
from ...delivery_events.bounce_tags import BounceAddress, day_of
from ...errors import CompositionError, TransportUnavailable
from ...message.dkim_signing import DkimSigner
from ...providers.seam import one_line
from ...settings.transports import SmtpSettings
from .attempt import LIBRARY_ERRORS, Attempt, Connection, SetupError, describe
from .envelope import address_problem, envelope_problem, listed_index, probe_recipient
from .replies import account_refusal, classify_reply, each_recipient
from .wire import Wire, WireError

_SIGN_IN_LOOP_BYTES = 256 * 1024  # messages up to this are DKIM-signed in the event loop (~2 ms)

__all__ = ["SmtpTransport", "classify_reply"]


@dataclass
class _Session:
    conn: Connection
    greeting: str
    esmtp: bool
    starttls_offered: bool
    tls: bool
    authenticated: bool


class SmtpTransport:
    """Sends through one SMTP server; at most ``settings.pool_size`` connections open."""

    def __init__(self, settings: SmtpSettings, *, name: str = "smtp", probe_sender: str | None = None,
                 signer: DkimSigner | None = None, bounces: BounceAddress | None = None,
                 per_recipient: bool = False) -> None:
        """``probe_sender``: MAIL FROM of :meth:`check`'s probe (None: ``postmaster@<helo name>``);
        ``signer``: DKIM-signs each message (None: DKIM off); ``bounces``: tags the envelope sender
        (None: the message's sender), ``per_recipient`` one transaction per recipient."""
        self.name = name
        self._bounces = bounces
        self._per_recipient = per_recipient and bounces is not None
        self._probe_sender = probe_sender
        self._signer = signer
        self.max_parallel = settings.pool_size
        self.send_timeout_seconds = settings.send_timeout_seconds
        self.idempotency_window_seconds = (
            settings.idempotency_window_seconds if settings.idempotency_header else None
        )
        self._settings = settings
        # fast_acquire: a free slot is taken without a turn of the event loop (~6 µs a send); a send
        # awaits the network right after, and a cancelled caller is still refused the slot
        self._slots = anyio.Semaphore(settings.pool_size, fast_acquire=True)
        self._idle: list[Connection] = []  # connected, no transaction open; LIFO
        self._local_hostname: str | None = None
        self._closed = False

    @property
    def _address(self) -> str:
        return f"{self._settings.host}:{self._settings.effective_port}"

    # -- sessions -----------------------------------------------------------

    async def _helo_name(self) -> str:
        if self._local_hostname is None:
            name = self._settings.helo_name
            if name is None:
                name = await anyio.to_thread.run_sync(socket.getfqdn)
                if not name or any(c.isspace() or not c.isprintable() for c in name):
                    name = "localhost"
            self._local_hostname = name
        return self._local_hostname

    async def _open(self) -> _Session:
        """Connect, greet, EHLO, STARTTLS and AUTH as configured; raise SetupError."""
        s = self._settings
        phase = "connect"
        smtp: SMTP | None = None
        try:
            smtp = SMTP(
                hostname=s.host,
                port=s.effective_port,
                local_hostname=await self._helo_name(),
                timeout=s.command_timeout_seconds,
                use_tls=s.tls == "implicit",
                start_tls=False,  # STARTTLS is done below, and required
                validate_certs=s.validate_certs,
                cert_bundle=s.ca_file,
            )
            greeting = await smtp.connect(timeout=s.connect_timeout_seconds)
            phase = "EHLO"
            await self._hello(smtp)
            offered = smtp.supports_extension("starttls")
            if s.tls == "starttls":
                phase = "STARTTLS"
                if not offered:
                    raise SetupError(
                        f"{self._address} STARTTLS: the server does not offer STARTTLS and tls=starttls "
                        "requires it; nothing was sent in clear text"
                    )
                await smtp.starttls()
                phase = "EHLO"
                await self._hello(smtp)
            if s.username is not None and s.password is not None:
                phase = "AUTH"
                await smtp.login(s.username, s.password.get_secret_value())
            tls = smtp.get_transport_info("sslcontext") is not None
            wire = None
            # a stream's transport, plain or TLS, is always a WriteTransport: the check tells the type checker
            if (smtp.supports_extension("pipelining") and isinstance(smtp.transport, asyncio.WriteTransport)
                    and smtp.protocol is not None):
                wire = Wire(smtp.transport, smtp.protocol)  # from now on it reads the replies
            return _Session(
                conn=Connection(smtp, wire),
                greeting=one_line(f"{greeting.code} {greeting.message}"),
                esmtp=smtp.supports_esmtp,
                starttls_offered=offered,
                tls=tls,
                authenticated=s.username is not None,
            )
        except SetupError:
            if smtp is not None:
                smtp.close()
            raise
        except LIBRARY_ERRORS as exc:
            if smtp is not None:
                smtp.close()
            code = exc.code if isinstance(exc, SMTPResponseException) and exc.code > 0 else None
            text = exc.message if isinstance(exc, SMTPResponseException) else ""
            raise SetupError(f"{self._address} {phase}: {describe(exc)}", code=code, text=text) from exc
        except BaseException:
            if smtp is not None:
                smtp.close()
            raise

    async def _connect(self) -> Connection:
        return (await self._open()).conn

    @staticmethod
    async def _hello(smtp: SMTP) -> None:
        try:
            await smtp.ehlo()
        except SMTPHeloError:
            if not smtp.is_connected:
                raise
            await smtp.helo()

    def _take_idle(self) -> Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if conn.usable:
                return conn
            conn.close()
        return None

    def _give_back(self, conn: Connection | None, reusable: bool) -> None:
        if conn is None:
            return
        if reusable and conn.usable and not self._closed:
            self._idle.append(conn)
        else:
            conn.close()

    # -- Transport ----------------------------------------------------------

    async def send(self, message: ComposedMessage, delivery: Delivery) -> Outcome:
        problem = envelope_problem(message)
        if problem is not None:
            return Outcome.permanent(problem)
        if self._closed:
            return Outcome.held_back(f"transport {self.name!r} is closed")
        header = self._settings.idempotency_header
        if header:
            key = idempotency_key(delivery, message)
            message = replace(message, data=f"{header}: {key}\r\n".encode("ascii") + message.data)
        if self._signer is not None:  # once per send: every transaction below carries these bytes
            try:  # a big message in a worker thread: 10 MiB take about 0.65 s to hash
                message = (self._signer.sign_message(message) if len(message.data) <= _SIGN_IN_LOOP_BYTES
                           else await anyio.to_thread.run_sync(self._signer.sign_message, message))
            except CompositionError as exc:
                return Outcome.unsendable(f"cannot DKIM-sign: {exc}")
        if self._bounces is not None:
            day = day_of(utc_now())
            if self._per_recipient and len(message.recipients) > 1:
                return await self._send_each(message, delivery, self._bounces, day)
            index = listed_index(delivery, message.recipients[0]) if self._per_recipient else 0
            message = replace(message, sender=self._bounces.sender(delivery.id, index, day))
        async with self._slots:
            attempt = Attempt(self._connect, self._settings, message)
            try:
                with anyio.move_on_after(self._settings.send_timeout_seconds) as scope:
                    outcome = await attempt.run(self._take_idle())
                if scope.cancelled_caught:
                    attempt.reusable = False
                    return attempt.cut_short(self._timed_out())
                return outcome
            finally:
                self._give_back(attempt.conn, attempt.reusable)

    def _timed_out(self) -> str:
        return f"no reply within the send timeout ({self._settings.send_timeout_seconds:g} s)"

    async def _send_each(self, message: ComposedMessage, delivery: Delivery, bounces: BounceAddress,
                         day: int) -> Outcome:
        """One transaction per recipient, each with its recipient's tag, one after the other on one connection."""
        outcomes: list[tuple[str, Outcome]] = []
        async with self._slots:
            conn, attempt = self._take_idle(), None
            try:
                with anyio.move_on_after(self._settings.send_timeout_seconds) as scope:
                    for recipient in message.recipients:
                        sender = bounces.sender(delivery.id, listed_index(delivery, recipient), day)
                        attempt = Attempt(self._connect, self._settings,
                                          replace(message, sender=sender, recipients=(recipient,)))
                        outcomes.append((recipient, await attempt.run(conn)))
                        if outcomes[-1][1].cause in (Cause.UNREACHABLE, Cause.PAUSED):
                            break  # no server judges the others now either
                        conn = attempt.conn if attempt.reusable else None
                        if conn is None and attempt.conn is not None:
                            attempt.conn.close()
                if scope.cancelled_caught and attempt is not None:
                    attempt.reusable = False
                    outcomes[-1:] = [(attempt.message.recipients[0], attempt.cut_short(self._timed_out()))]
            finally:
                if attempt is not None:
                    self._give_back(attempt.conn, attempt.reusable)
        if not outcomes:
            return Outcome.transient(self._timed_out())
        done = {address for address, _ in outcomes}
        return each_recipient(outcomes, [r for r in message.recipients if r not in done])

    async def check(self) -> str:
        async with self._slots:
            try:
                session = await self._open()
            except SetupError as exc:
                raise TransportUnavailable(str(exc), transport=self.name) from (exc.__cause__ or exc)
            try:
                probe = await self._probe(session.conn)
            finally:
                await self._quit(session.conn)
        details = [
            "ESMTP" if session.esmtp else "SMTP",
            f"tls={self._settings.tls}",
            f"STARTTLS {'yes' if session.starttls_offered else 'no'}",
            f"encrypted {'yes' if session.tls else 'no'}",
            f"AUTH {'ok' if session.authenticated else 'not used'}",
            probe,
        ]
        return f"{self._address} {session.greeting} ({', '.join(details)})"

    async def _probe(self, conn: Connection) -> str:
        """MAIL and RCPT without a message, then RSET; raise TransportUnavailable if the account is refused."""
        sender = self._probe_sender or f"postmaster@{await self._helo_name()}"
        problem = address_problem("sender", sender)
        if problem is not None:
            raise TransportUnavailable(f"probe sender {sender!r} {problem}", transport=self.name)
        recipient = probe_recipient(sender)
        timeout = self._settings.command_timeout_seconds
        utf8 = not sender.isascii()
        verb, note = "MAIL", "probe MAIL/RCPT accepted"
        try:
            for verb, address in (("MAIL", sender), ("RCPT", recipient)):
                code, text = await self._probe_command(conn, verb, address, utf8, timeout)
                if code in (250, 251):
                    continue
                reply = f"{code} {one_line(text)}"
                if account_refusal(code, text) or code == 421:
                    raise TransportUnavailable(
                        f"{self._address} probe {verb} <{address}>: {reply}"
                        + (": the server refuses mail from this account (authentication required or relaying "
                           "denied: check smtp.username and smtp.password)" if code != 421 else ""),
                        transport=self.name,
                    )
                note = f"probe {verb} refused: {reply}"
                break
            verb = "RSET"
            await self._probe_command(conn, "RSET", "", utf8, timeout)
        except (WireError, *LIBRARY_ERRORS) as exc:
            raise TransportUnavailable(f"{self._address} probe {verb}: {describe(exc)}", transport=self.name) from exc
        return note

    @staticmethod
    async def _probe_command(conn: Connection, verb: str, address: str, utf8: bool, timeout: float) -> tuple[int, str]:
        """One probe command's reply (code, text); raises WireError or a library error when the connection fails."""
        if conn.wire is not None:
            lines = {
                "MAIL": b"MAIL FROM:<%s>%s\r\n" % (address.encode(), b" SMTPUTF8" if utf8 else b""),
                "RCPT": b"RCPT TO:<%s>\r\n" % address.encode(),
                "RSET": b"RSET\r\n",
            }
            reply = await conn.wire.command(lines[verb], timeout)
            return reply.code, reply.text
        encoding = "utf-8" if utf8 else "ascii"
        try:
            if verb == "MAIL":
                response = await conn.smtp.mail(address, options=["SMTPUTF8"] if utf8 else [], encoding=encoding)
            elif verb == "RCPT":
                response = await conn.smtp.rcpt(address, encoding=encoding)
            else:
                response = await conn.smtp.rset()
        except SMTPResponseException as exc:  # MAIL/RCPT refused (SMTPSenderRefused, SMTPRecipientRefused)
            if not 400 <= exc.code < 600:
                raise
            return exc.code, exc.message
        return response.code, response.message

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        try:
            for conn in idle:
                await self._quit(conn)
        finally:
            for conn in idle:
                conn.close()

    async def _quit(self, conn: Connection) -> None:
        """Say goodbye politely but briefly; the connection is closed either way."""
        timeout = min(1.0, self._settings.command_timeout_seconds)
        try:
            with anyio.move_on_after(timeout):
                if conn.wire is not None:
                    await conn.wire.command(b"QUIT\r\n", timeout)
                else:
                    await conn.smtp.quit()
        except (WireError, *LIBRARY_ERRORS):
            pass
        finally:
            conn.close()
