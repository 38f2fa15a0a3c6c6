"""The one error tree of outbox-mailer.

Library errors (asyncpg, aiosmtplib, email-validator) are translated into
these at the edge that imports the library, with ``raise ... from exc``, so
the rest of the code and the CLI only ever see this tree::

    OutboxMailerError
     ├── ConfigurationError        bad settings; CLI exit 2
     ├── CompositionError          a row that cannot become a message (.field)
     ├── TemplateError             a template that does not compile or render (.reason); CLI exit 2
     ├── NotFound                  no row with that dedupe key, address, user (.key); CLI exit 1
     ├── InvalidTransition         the row is not in a state that allows it
     │    └── ContentRemoved       retry of a row whose content retention removed
     ├── DatabaseError             PostgreSQL said no, or is gone
     │    ├── DatabaseUnavailable  cannot connect / connection lost; CLI exit 3
     │    └── SchemaMismatch       schema not migrated to what the code needs
     └── TransportError            a transport cannot be used at all (.transport)
          └── TransportUnavailable cannot connect / greet; CLI exit 3

Outcomes of a send attempt (sent, refused, timed out ...) are *not*
exceptions: a transport returns an :class:`outbox_mailer.delivery.Outcome`.
"""

from __future__ import annotations


class OutboxMailerError(Exception):
    """Base of every error raised by outbox-mailer."""


class ConfigurationError(OutboxMailerError):
    """Settings are missing, malformed or contradict each other."""

    def __init__(self, message: str, *, setting: str | None = None) -> None:
        super().__init__(message)
        self.setting = setting


class CompositionError(OutboxMailerError):
    """A row passed the table's constraints but cannot be turned into a message."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class TemplateError(OutboxMailerError):
    """A stored template that does not compile (``reason`` names its part, line and column), or a render
    that failed or hit a limit (an undefined variable named, the time or memory limit, the size cap)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class NotFound(OutboxMailerError):
    """Nothing has this key: no delivery has this dedupe key, or ``message`` says what is missing
    (an address not suppressed, a console user)."""

    def __init__(self, key: str, message: str | None = None) -> None:
        super().__init__(message or f"no email with dedupe key {key!r}")
        self.key = key


class InvalidTransition(OutboxMailerError):
    """The row exists but its status does not allow the requested change (``message``: why, when
    its status alone does not say)."""

    def __init__(self, key: str, status: str, wanted: str, message: str | None = None) -> None:
        super().__init__(message or f"email {key!r} is {status}; cannot {wanted}")
        self.key = key
        self.status = status
        self.wanted = wanted


class ContentRemoved(InvalidTransition):
    """A retry of a final row whose bodies, attachments and headers retention removed (prune's scrub):
    sending it again would send its subject with nothing else."""

    def __init__(self, key: str, status: str) -> None:
        super().__init__(key, status, "retry", f"email {key!r} is {status} and retention removed its content "
                                               "(bodies, attachments, headers): it cannot be retried; enqueue it "
                                               "again under a new dedupe key")


class DatabaseError(OutboxMailerError):
    """PostgreSQL refused a statement or the connection failed."""


class DatabaseUnavailable(DatabaseError):
    """PostgreSQL cannot be reached, or the connection was lost."""


class DatabaseBusy(DatabaseUnavailable):
    """A statement ran into the daemon's lock_timeout or statement_timeout (a table locked by a
    migration, a row an application holds): the connection is fine, the statement is to be tried
    again later, like one that found the database away, never given up on."""


class SchemaMismatch(DatabaseError):
    """The database schema is not at the version this code expects."""


class TransportError(OutboxMailerError):
    """A transport cannot be used at all (as opposed to one failed send)."""

    def __init__(self, message: str, *, transport: str = "smtp") -> None:
        super().__init__(message)
        self.transport = transport


class TransportUnavailable(TransportError):
    """The mail server or API cannot be reached or refuses the session."""
