"""The database edge: the only package that imports asyncpg.

* :class:`Store` (``admin.py``) – short operations on a small pool (CLI, migrate, enqueue, prune).
* :class:`ClaimSession` (``claims.py``) – the daemon's claiming connection. Advisory locks
  are session level, so claims, outcome writes and unlocks all run on this one
  connection, one statement at a time.
* :class:`Listener` (``listener.py``) – a connection that LISTENs for the insert trigger.
* :class:`EventStore` (``events.py``) – delivery events and suppressions (receiver, ``ingest-dsn``, CLI).

asyncpg errors are translated here (``connection.py``) into :mod:`outbox_mailer.errors`.
Beside them: every runtime query as a named block (``queries.sql``, ``console_queries.sql``, loaded by
``queries.py``), the migrations' loader (``migrations.py``), the roles' grants (``grants.py``) and the
identity of a daemon process that claims record (``processes.py``).
"""

from .admin import Store
from .claims import ClaimSession
from .connection import CHANNEL, SessionLimits, translate_errors
from .events import EventStore
from .listener import Listener
from .outcomes import AttemptRecord, OutcomeWrite
from .rescues import DeadClaim, Recipients, RecordedBatch

__all__ = ["CHANNEL", "AttemptRecord", "ClaimSession", "DeadClaim", "EventStore", "Listener", "OutcomeWrite",
           "Recipients", "RecordedBatch", "SessionLimits", "Store", "translate_errors"]
