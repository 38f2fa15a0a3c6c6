"""SMTP transport over a pool of persistent aiosmtplib connections.

The only module that imports aiosmtplib. A send runs the phases itself
(MAIL, one RCPT per recipient, DATA) so that it knows where a failure
happened, which is what decides the outcome:

* a reply refusing MAIL/RCPT/DATA: not sent; 4xx (421 too) transient, 5xx
  permanent, classified by the reply code (never by exception class);
* a timeout or lost connection before DATA: not sent, transient;
* a timeout or lost connection inside DATA: ambiguous (the server may have
  accepted the message);
* 250 after the message body: sent.

Failures while setting a session up (connect, greeting, EHLO, STARTTLS,
AUTH) are the server's or the configuration's, not the message's: the
outcome is transient with ``charge_attempt=False``, and :meth:`check`
raises :class:`~outbox_mailer.errors.TransportUnavailable` for them.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass, replace

import anyio
from aiosmtplib import (
    SMTP,
    SMTPException,
    SMTPHeloError,
    SMTPRecipientRefused,
    SMTPResponseException,
    SMTPServerDisconnected,
)
from aiosmtplib.email import parse_address

from ..config import SmtpSettings
from ..delivery import (
    ComposedMessage,
    Delivery,
    Outcome,
    OutcomeKind,
    RefusedRecipient,
    idempotency_key,
)
from ..errors import TransportUnavailable

__all__ = ["SmtpTransport", "classify_reply"]

# RFC 3463 status code: class.subject.detail, class 2, 4 or 5.
_ENHANCED_CODE = re.compile(r"[245]\.\d{1,3}\.\d{1,3}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ID_TOKEN = re.compile(r"[A-Za-z0-9._@+/-]{5,}")
_MAX_TEXT = 400
# Errors an aiosmtplib call can raise besides cancellation (TimeoutError and
# ssl.SSLError are OSErrors; ValueError covers refused command arguments).
_LIBRARY_ERRORS = (SMTPException, OSError, ValueError)


def classify_reply(code: int, text: str) -> tuple[OutcomeKind, str | None]:
    """Kind of outcome a final SMTP reply means, and its RFC 3463 enhanced code.

    2xx: sent; 4xx (421 included): transient; 5xx: permanent. Anything else
    (1xx, 3xx, a malformed reply) neither accepted nor refused the message for
    good: transient. The enhanced code is the first word of the reply text when
    it has the form ``class.subject.detail``.
    """
    words = text.split(None, 1)
    enhanced = words[0] if words and _ENHANCED_CODE.fullmatch(words[0]) else None
    if 200 <= code < 300:
        return OutcomeKind.SENT, enhanced
    if 500 <= code < 600:
        return OutcomeKind.PERMANENT, enhanced
    return OutcomeKind.TRANSIENT, enhanced


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _MAX_TEXT else line[: _MAX_TEXT - 3] + "..."


def _describe(exc: BaseException) -> str:
    """A library error as one line, without secrets (replies and our own texts only)."""
    if isinstance(exc, SMTPResponseException) and exc.code > 0:
        return f"{exc.code} {_one_line(exc.message)}"
    if isinstance(exc, SMTPException):
        return _one_line(exc.message) or type(exc).__name__
    return _one_line(f"{type(exc).__name__}: {exc}")


def _queue_id(reply_text: str) -> str | None:
    """The reply text after DATA when it carries a queue id (a token with a digit)."""
    words = _one_line(reply_text).split()
    if words and _ENHANCED_CODE.fullmatch(words[0]):
        words = words[1:]
    for word in words:
        for token in re.split(r"[=:<>()\[\],;]", word):
            if _ID_TOKEN.fullmatch(token) and any(c.isdigit() for c in token):
                return _one_line(reply_text)[:255]
    return None


def _refusals(refused: list[RefusedRecipient], prefix: str) -> str:
    return prefix + "; ".join(f"RCPT <{r.address}>: {r.reply_code} {r.message}" for r in refused)


def _envelope_problem(message: ComposedMessage) -> str | None:
    """Why the envelope cannot go on an SMTP command line, or None."""
    if not message.recipients:
        return "envelope has no recipients"
    roles = [("sender", message.sender)] + [("recipient", r) for r in message.recipients]
    for role, address in roles:
        problem = None
        if _CONTROL.search(address):
            problem = "contains control characters"
        elif role == "recipient" and "@" not in address:
            problem = "is not an address"
        else:
            try:
                if parse_address(address) != address:
                    problem = "is not a bare address"
            except ValueError:
                problem = "contains characters not allowed on an SMTP command line"
        if problem:
            return f"envelope {role} {address!r} {problem}"
    return None


class _SetupError(Exception):
    """A session could not be set up (connect, greeting, EHLO, STARTTLS, AUTH)."""

    def __init__(self, message: str, *, code: int | None = None, text: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.enhanced_code = classify_reply(code, text)[1] if code else None

    def outcome(self) -> Outcome:
        return Outcome.transient(
            str(self), reply_code=self.code, enhanced_code=self.enhanced_code, charge_attempt=False
        )


@dataclass
class _Session:
    smtp: SMTP
    greeting: str
    esmtp: bool
    starttls_offered: bool
    tls: bool
    authenticated: bool


class SmtpTransport:
    """Sends through one SMTP server; at most ``settings.pool_size`` connections open."""

    def __init__(self, settings: SmtpSettings, *, name: str = "smtp") -> None:
        self.name = name
        self.max_parallel = settings.pool_size
        self.send_timeout_seconds = settings.send_timeout_seconds
        self.idempotency_window_seconds = (
            settings.idempotency_window_seconds if settings.idempotency_header else None
        )
        self._settings = settings
        self._slots = anyio.Semaphore(settings.pool_size)
        self._idle: list[SMTP] = []  # connected, no transaction open; LIFO
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
        """Connect, greet, EHLO, STARTTLS and AUTH as configured; raise _SetupError."""
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
                    raise _SetupError(
                        f"{self._address} STARTTLS: the server does not offer STARTTLS and tls=starttls "
                        "requires it; nothing was sent in clear text"
                    )
                await smtp.starttls()
                phase = "EHLO"
                await self._hello(smtp)
            if s.username is not None and s.password is not None:
                phase = "AUTH"
                await smtp.login(s.username, s.password.get_secret_value())
            return _Session(
                smtp=smtp,
                greeting=_one_line(f"{greeting.code} {greeting.message}"),
                esmtp=smtp.supports_esmtp,
                starttls_offered=offered,
                tls=smtp.get_transport_info("sslcontext") is not None,
                authenticated=s.username is not None,
            )
        except _SetupError:
            if smtp is not None:
                smtp.close()
            raise
        except _LIBRARY_ERRORS as exc:
            if smtp is not None:
                smtp.close()
            code = exc.code if isinstance(exc, SMTPResponseException) and exc.code > 0 else None
            text = exc.message if isinstance(exc, SMTPResponseException) else ""
            raise _SetupError(f"{self._address} {phase}: {_describe(exc)}", code=code, text=text) from exc
        except BaseException:
            if smtp is not None:
                smtp.close()
            raise

    @staticmethod
    async def _hello(smtp: SMTP) -> None:
        try:
            await smtp.ehlo()
        except SMTPHeloError:
            if not smtp.is_connected:
                raise
            await smtp.helo()

    def _take_idle(self) -> SMTP | None:
        while self._idle:
            smtp = self._idle.pop()
            if smtp.is_connected:
                return smtp
            smtp.close()
        return None

    def _give_back(self, smtp: SMTP | None, reusable: bool) -> None:
        if smtp is None:
            return
        if reusable and smtp.is_connected and not self._closed:
            self._idle.append(smtp)
        else:
            smtp.close()

    # -- Transport ----------------------------------------------------------

    async def send(self, message: ComposedMessage, delivery: Delivery) -> Outcome:
        problem = _envelope_problem(message)
        if problem is not None:
            return Outcome.permanent(problem)
        if self._closed:
            return Outcome.transient(f"transport {self.name!r} is closed", charge_attempt=False)
        header = self._settings.idempotency_header
        if header:
            key = idempotency_key(delivery, message)
            message = replace(message, data=f"{header}: {key}\r\n".encode("ascii") + message.data)
        async with self._slots:
            attempt = _Attempt(self, message)
            try:
                with anyio.move_on_after(self._settings.send_timeout_seconds) as scope:
                    outcome = await attempt.run(self._take_idle())
                if scope.cancelled_caught:
                    attempt.reusable = False
                    limit = f"no reply within the send timeout ({self._settings.send_timeout_seconds:g} s)"
                    if attempt.phase == "DATA":
                        return Outcome.ambiguous(f"DATA: {limit}; the server may have accepted the message")
                    return Outcome.transient(f"{attempt.phase}: {limit}")
                return outcome
            finally:
                self._give_back(attempt.smtp, attempt.reusable)

    async def check(self) -> str:
        async with self._slots:
            try:
                session = await self._open()
            except _SetupError as exc:
                raise TransportUnavailable(str(exc), transport=self.name) from (exc.__cause__ or exc)
            await self._quit(session.smtp)
        details = [
            "ESMTP" if session.esmtp else "SMTP",
            f"tls={self._settings.tls}",
            f"STARTTLS {'yes' if session.starttls_offered else 'no'}",
            f"encrypted {'yes' if session.tls else 'no'}",
            f"AUTH {'ok' if session.authenticated else 'not used'}",
        ]
        return f"{self._address} {session.greeting} ({', '.join(details)})"

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        try:
            for smtp in idle:
                await self._quit(smtp)
        finally:
            for smtp in idle:
                smtp.close()

    async def _quit(self, smtp: SMTP) -> None:
        """Say goodbye politely but briefly; the connection is closed either way."""
        try:
            with anyio.move_on_after(min(1.0, self._settings.command_timeout_seconds)):
                await smtp.quit()
        except _LIBRARY_ERRORS:
            pass
        finally:
            smtp.close()


class _Attempt:
    """One send on a borrowed connection; ``smtp``/``reusable`` say what to give back."""

    def __init__(self, transport: SmtpTransport, message: ComposedMessage) -> None:
        self.transport = transport
        self.message = message
        self.settings = transport._settings
        self.smtp: SMTP | None = None
        self.reusable = False
        self.phase = "connect"

    async def run(self, smtp: SMTP | None) -> Outcome:
        msg = self.message
        reused = smtp is not None
        while True:
            if smtp is None:
                self.phase = "connect"
                try:
                    smtp = (await self.transport._open()).smtp
                except _SetupError as exc:
                    return exc.outcome()
            self.smtp = smtp
            options = self._mail_options(smtp)
            if isinstance(options, Outcome):
                self.reusable = True
                return options
            mail_options, encoding = options
            self.phase = f"MAIL <{msg.sender}>"
            try:
                await smtp.mail(msg.sender, options=mail_options, encoding=encoding)
            except SMTPServerDisconnected as exc:
                if reused:
                    # An idle connection the server closed meanwhile: nothing
                    # was sent; try once more on a new connection.
                    smtp.close()
                    self.smtp = smtp = None
                    reused = False
                    continue
                return await self._failed_before_data(exc)
            except _LIBRARY_ERRORS as exc:
                return await self._failed_before_data(exc)
            break

        refused: list[RefusedRecipient] = []
        accepted = 0
        for recipient in msg.recipients:
            self.phase = f"RCPT <{recipient}>"
            try:
                await smtp.rcpt(recipient, encoding=encoding)
            except SMTPRecipientRefused as exc:
                if not 400 <= exc.code < 600 or exc.code == 421 or not smtp.is_connected:
                    return await self._failed_before_data(exc, refused)
                refused.append(RefusedRecipient(recipient, exc.code, _one_line(exc.message)))
                continue
            except _LIBRARY_ERRORS as exc:
                return await self._failed_before_data(exc, refused)
            accepted += 1

        if not accepted:
            return await self._all_refused(refused)

        self.phase = "DATA"
        try:
            response = await smtp.data(msg.data, timeout=self.settings.data_timeout_seconds)
        except SMTPResponseException as exc:
            if 400 <= exc.code < 600:
                return await self._failed_before_data(exc, refused)
            return self._ambiguous(exc, refused)
        except _LIBRARY_ERRORS as exc:
            return self._ambiguous(exc, refused)
        self.reusable = True
        _, enhanced = classify_reply(response.code, response.message)
        return Outcome.sent(
            provider_message_id=_queue_id(response.message),
            error=_refusals(refused, "some recipients refused: ") if refused else None,
            reply_code=response.code,
            enhanced_code=enhanced,
            refused=tuple(refused),
        )

    def _mail_options(self, smtp: SMTP) -> tuple[list[str], str] | Outcome:
        msg = self.message
        options: list[str] = []
        encoding = "ascii"
        if not all(a.isascii() for a in (msg.sender, *msg.recipients)):
            if not smtp.supports_extension("smtputf8"):
                return Outcome.permanent(
                    "MAIL: the envelope has non-ASCII addresses and the server does not offer SMTPUTF8"
                )
            options.append("SMTPUTF8")
            encoding = "utf-8"
        if smtp.supports_extension("size"):
            size = len(msg.data) + (0 if msg.data.endswith(b"\r\n") else 2)
            options.append(f"SIZE={size}")
        if not msg.data.isascii() and smtp.supports_extension("8bitmime"):
            options.append("BODY=8BITMIME")
        return options, encoding

    async def _failed_before_data(
        self, exc: BaseException, refused: list[RefusedRecipient] | None = None
    ) -> Outcome:
        """Nothing was sent: classify a refusal by its code, anything else is transient."""
        refused_t = tuple(refused or ())
        if isinstance(exc, SMTPResponseException) and 400 <= exc.code < 600:
            kind, enhanced = classify_reply(exc.code, exc.message)
            if exc.code != 421:
                await self._reset()
            if isinstance(exc, SMTPRecipientRefused):
                refused_t += (RefusedRecipient(exc.recipient, exc.code, _one_line(exc.message)),)
            return Outcome(
                kind,
                error=f"{self.phase}: {exc.code} {_one_line(exc.message)}",
                reply_code=exc.code,
                enhanced_code=enhanced,
                refused=refused_t,
            )
        # A timeout, a lost connection or a malformed reply: the library has
        # closed the connection (or it cannot be trusted any more).
        self.reusable = False
        return Outcome.transient(f"{self.phase}: {_describe(exc)}", refused=refused_t)

    async def _all_refused(self, refused: list[RefusedRecipient]) -> Outcome:
        await self._reset()
        temporary = [r for r in refused if r.reply_code is not None and r.reply_code < 500]
        deciding = temporary[0] if temporary else refused[0]
        kind = OutcomeKind.TRANSIENT if temporary else OutcomeKind.PERMANENT
        return Outcome(
            kind,
            error=_refusals(refused, "" if len(refused) == 1 else "all recipients refused: "),
            reply_code=deciding.reply_code,
            enhanced_code=classify_reply(deciding.reply_code or 0, deciding.message)[1],
            refused=tuple(refused),
        )

    def _ambiguous(self, exc: BaseException, refused: list[RefusedRecipient]) -> Outcome:
        self.reusable = False
        return Outcome.ambiguous(
            f"DATA: {_describe(exc)}; the server may have accepted the message", refused=tuple(refused)
        )

    async def _reset(self) -> None:
        """RSET after a refusal so the connection stays usable; drop it if that fails."""
        smtp = self.smtp
        self.reusable = False
        if smtp is None or not smtp.is_connected:
            return
        try:
            await smtp.rset()
        except _LIBRARY_ERRORS:
            return
        self.reusable = True
