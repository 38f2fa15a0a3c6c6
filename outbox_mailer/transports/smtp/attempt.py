"""One SMTP send on a pooled connection, phase by phase (see :mod:`.transport` for the outcome rules).

Two ways, chosen by the server's EHLO reply:

* PIPELINING offered (RFC 2920): MAIL, every RCPT and DATA go out in one
  write; the replies are then read in order from the connection's
  :class:`~.wire.Wire`; on 354 the dot-stuffed body follows, then the
  final reply: two round trips per message. The MAIL reply decides when it
  refuses (the RCPT/DATA replies after it are mere 503s); a DATA opened with
  354 although no recipient was accepted is closed with a lone ``.``, no body.
  The body is written only after 354, so a timeout or a lost connection
  before that is transient, and only after it ambiguous.
* otherwise one command at a time through aiosmtplib's ``mail()``, ``rcpt()``
  and ``data()``; ``data()`` writes DATA and the body in one call, so a
  failure anywhere inside it is ambiguous.

Either way a refusal is followed by RSET so the connection stays usable
(except after 421: the server is closing it).

Recipients refused with 452 (too many recipients in one transaction, RFC
5321 section 4.5.3.1.10; Postfix's ``smtpd_recipient_limit``) are sent in
further transactions on the same connection, within the same attempt, once
a transaction was accepted (DATA answered 250): MAIL, their RCPTs and DATA
again, the same bytes, as long as each follow-up makes progress (at least one
recipient accepted and the body accepted). Only 452: another 4xx means "try
later" and stays refused. The attempt is then sent, with the first accepted
transaction's queue id, and ``refused`` holds every recipient the message did not reach
(:func:`.replies.follow_up`): its refusal reply, or code None when a follow-up broke before its
body went out, or ``unknown`` when a follow-up lost its connection after the body.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiosmtplib import (
    SMTP,
    SMTPException,
    SMTPRecipientRefused,
    SMTPResponseException,
    SMTPServerDisconnected,
)

from ...delivery import ComposedMessage, Outcome, OutcomeKind, RefusedRecipient
from ...providers.seam import one_line
from ...settings.transports import SmtpSettings
from . import replies
from .wire import Reply, Wire, WireError, frame_body

__all__ = ["LIBRARY_ERRORS", "Attempt", "Connection", "SetupError", "describe"]

# Errors an aiosmtplib call can raise besides cancellation (TimeoutError and
# ssl.SSLError are OSErrors; ValueError covers refused command arguments).
LIBRARY_ERRORS = (SMTPException, OSError, ValueError)


def describe(exc: BaseException) -> str:
    """A library error as one line, without secrets (replies and our own texts only)."""
    if isinstance(exc, SMTPResponseException) and exc.code > 0:
        return f"{exc.code} {one_line(exc.message)}"
    if isinstance(exc, SMTPException):
        return one_line(exc.message) or type(exc).__name__
    return one_line(f"{type(exc).__name__}: {exc}")


class SetupError(Exception):
    """A session could not be set up (connect, greeting, EHLO, STARTTLS, AUTH)."""

    def __init__(self, message: str, *, code: int | None = None, text: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.enhanced_code = replies.classify_reply(code, text)[1] if code else None

    def outcome(self) -> Outcome:
        return Outcome.unreachable(str(self), reply_code=self.code, enhanced_code=self.enhanced_code)


@dataclass(eq=False, slots=True)
class Connection:
    """A session set up by aiosmtplib; ``wire`` reads the replies when the server pipelines."""

    smtp: SMTP
    wire: Wire | None

    @property
    def usable(self) -> bool:
        return self.smtp.is_connected and (self.wire is None or self.wire.idle)

    def close(self) -> None:
        self.smtp.close()


def _is_refusal(code: int) -> bool:
    return 400 <= code < 600


class Attempt:
    """One send; ``conn``/``reusable`` say what to give back to the pool afterwards.

    ``phase`` names the command whose reply is awaited; ``maybe_accepted`` turns
    true once the body may have reached the server; ``decided`` holds the
    outcome while the RSET after a refusal is under way: all three about the
    transaction under way. ``first`` is the first accepted transaction's
    outcome; ``settled`` the attempt's refusals so far, by address.
    """

    def __init__(
        self, connect: Callable[[], Awaitable[Connection]], settings: SmtpSettings, message: ComposedMessage
    ) -> None:
        self._connect = connect
        self.settings = settings
        self.message = message
        self.conn: Connection | None = None
        self.reusable = False
        self.phase = "connect"
        self.maybe_accepted = False
        self.decided: Outcome | None = None
        self.first: Outcome | None = None
        self.settled: dict[str, RefusedRecipient] = {}
        self._current: tuple[str, ...] = ()  # recipients of the transaction under way
        self._txn_refused: list[RefusedRecipient] = []  # ... refused in it so far

    async def run(self, conn: Connection | None) -> Outcome:
        reused = conn is not None
        while True:
            if conn is None:
                self.phase = "connect"
                try:
                    conn = await self._connect()
                except SetupError as exc:
                    return exc.outcome()
            self.conn = conn
            options = self._mail_options(conn.smtp)
            if isinstance(options, Outcome):
                self.reusable = True
                return options
            outcome = await self._transaction(conn, options, self.message.recipients, may_retry=reused)
            if outcome is not None and outcome.kind is OutcomeKind.SENT and outcome.refused:  # else nothing to merge
                return await self._follow_ups(conn, options, outcome)
            if outcome is not None:
                return outcome
            # An idle connection the server closed meanwhile: nothing was
            # sent; try once more on a new connection.
            conn.close()
            self.conn = conn = None
            reused = False

    async def _transaction(
        self, conn: Connection, options: tuple[list[str], str], recipients: tuple[str, ...], *, may_retry: bool
    ) -> Outcome | None:
        self.maybe_accepted, self.decided = False, None
        self._current, self._txn_refused = recipients, []
        if conn.wire is not None:
            return await self._pipelined(conn.wire, *options, recipients, may_retry=may_retry)
        return await self._one_by_one(conn.smtp, *options, recipients, may_retry=may_retry)

    async def _follow_ups(self, conn: Connection, options: tuple[list[str], str], first: Outcome) -> Outcome:
        """Send to the recipients refused with 452 in further transactions while each makes progress."""
        self.first, self._current = first, ()
        self.settled = {r.address: r for r in first.refused}
        pending = self._too_many(first.refused)
        while pending and self.reusable and conn.usable:
            outcome = await self._transaction(conn, options, pending, may_retry=False)
            assert outcome is not None  # may_retry=False
            self._settle(outcome)
            if outcome.kind is not OutcomeKind.SENT:  # nobody accepted: no progress
                break
            pending = self._too_many(outcome.refused)
        return self._combined()

    @staticmethod
    def _too_many(refused: tuple[RefusedRecipient, ...]) -> tuple[str, ...]:
        return tuple(r.address for r in refused if r.reply_code == replies.TOO_MANY_RECIPIENTS and not r.unknown)

    def _settle(self, outcome: Outcome) -> None:
        """Record what a follow-up transaction did for its recipients."""
        accepted, refused = replies.follow_up(self._current, outcome)
        for address in accepted:
            self.settled.pop(address, None)
        self.settled.update((r.address, r) for r in refused)
        self._current = ()

    def _combined(self) -> Outcome:
        assert self.first is not None
        order = [a for a in self.message.recipients if a in self.settled]
        return replies.with_refused(self.first, [self.settled[a] for a in order])

    def cut_short(self, limit: str) -> Outcome:
        """The outcome when the send timeout stopped the attempt (``limit`` says so)."""
        if self.decided is not None:  # refused; the RSET after it timed out
            outcome = self.decided
        elif self.maybe_accepted:
            outcome = replies.ambiguous(limit, self._txn_refused)
        else:
            outcome = Outcome.transient(f"{self.phase}: {limit}", refused=tuple(self._txn_refused))
        if self.first is None:
            return outcome
        if self._current:
            self._settle(outcome)
        return self._combined()

    def _mail_options(self, smtp: SMTP) -> tuple[list[str], str] | Outcome:
        msg = self.message
        options: list[str] = []
        encoding = "ascii"
        if not all(a.isascii() for a in (msg.sender, *msg.recipients)) or not _head_is_ascii(msg.data):
            if not smtp.supports_extension("smtputf8"):
                return Outcome.permanent(
                    "MAIL: the message has internationalised (non-ASCII) addresses and the server does not "
                    "offer SMTPUTF8 (RFC 6531); nothing was sent"
                )
            options.append("SMTPUTF8")
            encoding = "utf-8"
        if smtp.supports_extension("size"):
            size = len(msg.data) + (0 if msg.data.endswith(b"\r\n") else 2)
            options.append(f"SIZE={size}")
        if not msg.data.isascii() and smtp.supports_extension("8bitmime"):
            options.append("BODY=8BITMIME")
        return options, encoding

    # -- pipelined (RFC 2920) ---------------------------------------------------

    async def _pipelined(
        self, wire: Wire, options: list[str], encoding: str, recipients: tuple[str, ...], *, may_retry: bool
    ) -> Outcome | None:
        msg, timeout = self.message, self.settings.command_timeout_seconds
        mail = b"MAIL FROM:<" + msg.sender.encode(encoding) + b">"
        lines = [b" ".join([mail, *(o.encode() for o in options)])]
        lines += [b"RCPT TO:<" + r.encode(encoding) + b">" for r in recipients]
        lines.append(b"DATA\r\n")
        self.phase = f"MAIL <{msg.sender}>"
        try:
            wire.write(b"\r\n".join(lines))
            reply = await wire.reply(timeout)
        except WireError as exc:
            return None if exc.lost and may_retry else self._broken(str(exc))
        if reply.code != 250:
            return await self._ended_early(wire, reply, [], due=len(recipients) + 1)

        refused = self._txn_refused
        for n, recipient in enumerate(recipients, 1):
            self.phase = f"RCPT <{recipient}>"
            try:
                reply = await wire.reply(timeout)
            except WireError as exc:
                return self._broken(str(exc), refused)
            if reply.code in (250, 251):
                continue
            if not _is_refusal(reply.code):
                return self._broken(f"{reply.code} {one_line(reply.text)}", refused)
            refused.append(RefusedRecipient(recipient, reply.code, one_line(reply.text)))
            if reply.code == 421 or wire.finished:
                return await self._ended_early(wire, reply, refused, due=len(recipients) - n + 1)

        self.phase = "DATA"
        everyone_refused = len(refused) == len(recipients)
        try:
            reply = await wire.reply(timeout)
        except WireError as exc:
            if everyone_refused:
                return await self._refused(replies.all_refused(refused), reset=True)
            return self._broken(str(exc), refused)
        if everyone_refused:
            if reply.code == 354:
                await self._finish_data(wire)
            return await self._refused(replies.all_refused(refused), reset=True)
        if reply.code != 354:
            if _is_refusal(reply.code):
                return await self._refused(replies.refusal("DATA", *reply, refused), reset=reply.code != 421)
            return self._broken(f"{reply.code} {one_line(reply.text)}", refused)

        self.maybe_accepted = True
        try:
            wire.write(frame_body(msg.data))
            reply = await wire.reply(self.settings.data_timeout_seconds)
        except WireError as exc:
            return self._lost_after_body(str(exc), refused)
        if reply.code == 250:
            self.reusable = True
            return replies.accepted(*reply, refused)
        if _is_refusal(reply.code):
            return await self._refused(replies.refusal("DATA", *reply, refused), reset=reply.code != 421)
        return self._lost_after_body(f"{reply.code} {one_line(reply.text)}", refused)

    async def _ended_early(
        self, wire: Wire, reply: Reply, refused: list[RefusedRecipient], *, due: int
    ) -> Outcome:
        """A reply ended the transaction before DATA; ``due`` replies of the group are still to come."""
        if not _is_refusal(reply.code):
            return self._broken(f"{reply.code} {one_line(reply.text)}", refused)
        outcome = replies.refusal(self.phase, *reply, refused)
        if reply.code == 421:  # the server is closing the connection
            return await self._refused(outcome, reset=False)
        self.decided = outcome
        try:
            for _ in range(due):
                last = await wire.reply(self.settings.command_timeout_seconds)
            if last.code == 354:  # DATA accepted after all: end it empty
                await self._finish_data(wire)
        except WireError:
            pass  # out of sync: the RSET fails and the connection is dropped
        return await self._refused(outcome, reset=True)

    async def _finish_data(self, wire: Wire) -> None:
        """End a DATA the server opened although no recipient was accepted: no body, just the dot."""
        try:
            await wire.command(b".\r\n", self.settings.data_timeout_seconds)
        except WireError:
            pass

    # -- one command at a time --------------------------------------------------

    async def _one_by_one(
        self, smtp: SMTP, options: list[str], encoding: str, recipients: tuple[str, ...], *, may_retry: bool
    ) -> Outcome | None:
        msg = self.message
        self.phase = f"MAIL <{msg.sender}>"
        try:
            await smtp.mail(msg.sender, options=options, encoding=encoding)
        except SMTPServerDisconnected as exc:
            return None if may_retry else await self._failed(exc)
        except LIBRARY_ERRORS as exc:
            return await self._failed(exc)

        refused = self._txn_refused
        for recipient in recipients:
            self.phase = f"RCPT <{recipient}>"
            try:
                await smtp.rcpt(recipient, encoding=encoding)
            except SMTPRecipientRefused as exc:
                if not _is_refusal(exc.code) or exc.code == 421 or not smtp.is_connected:
                    return await self._failed(exc, refused)
                refused.append(RefusedRecipient(recipient, exc.code, one_line(exc.message)))
            except LIBRARY_ERRORS as exc:
                return await self._failed(exc, refused)

        if len(refused) == len(recipients):
            return await self._refused(replies.all_refused(refused), reset=True)

        self.phase = "DATA"
        self.maybe_accepted = True  # data() writes DATA and the body in one go
        try:
            response = await smtp.data(msg.data, timeout=self.settings.data_timeout_seconds)
        except SMTPResponseException as exc:
            if _is_refusal(exc.code):
                return await self._failed(exc, refused)
            return self._lost_after_body(describe(exc), refused)
        except LIBRARY_ERRORS as exc:
            return self._lost_after_body(describe(exc), refused)
        self.reusable = True
        return replies.accepted(response.code, response.message, refused)

    async def _failed(self, exc: BaseException, refused: list[RefusedRecipient] | None = None) -> Outcome:
        """Nothing was sent: classify a refusal by its code, anything else is transient."""
        refused = list(refused or ())
        if isinstance(exc, SMTPResponseException) and _is_refusal(exc.code):
            if isinstance(exc, SMTPRecipientRefused):
                refused.append(RefusedRecipient(exc.recipient, exc.code, one_line(exc.message)))
            outcome = replies.refusal(self.phase, exc.code, exc.message, refused)
            return await self._refused(outcome, reset=exc.code != 421)
        # A timeout, a lost connection or a malformed reply: the library has
        # closed the connection (or it cannot be trusted any more).
        return self._broken(describe(exc), refused)

    # -- endings ----------------------------------------------------------------

    def _broken(self, description: str, refused: list[RefusedRecipient] | None = None) -> Outcome:
        """The connection failed before the body went out: not sent, transient; drop the connection."""
        self.reusable = False
        return Outcome.transient(f"{self.phase}: {description}", refused=tuple(refused or ()))

    def _lost_after_body(self, description: str, refused: list[RefusedRecipient]) -> Outcome:
        self.reusable = False
        return replies.ambiguous(description, refused)

    async def _refused(self, outcome: Outcome, *, reset: bool) -> Outcome:
        """A refusal ended the transaction: RSET so the connection stays usable (not after 421)."""
        self.decided = outcome
        self.reusable = False
        conn = self.conn
        if not reset or conn is None or not conn.smtp.is_connected:
            return outcome
        timeout = self.settings.command_timeout_seconds
        try:
            if conn.wire is not None:
                if (await conn.wire.command(b"RSET\r\n", timeout)).code != 250:
                    return outcome
            else:
                await conn.smtp.rset()
        except (WireError, *LIBRARY_ERRORS):
            return outcome
        self.reusable = True
        return outcome


def _head_is_ascii(data: bytes) -> bool:
    """Whether the header section is ASCII (UTF-8 headers, RFC 6532, need SMTPUTF8 as much as the envelope)."""
    end = data.find(b"\r\n\r\n")
    return data[: end if end >= 0 else len(data)].isascii()
