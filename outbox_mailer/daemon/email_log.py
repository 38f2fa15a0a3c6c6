"""The log line of one recorded email: its fields, built once from the write that recorded it.

The recorder calls :func:`log_email` for each write after the statement that applied it (or refused it:
a lost claim), so a line states the recorded truth. Levels: a sent email and a retry scheduled at
INFO, a failed or in-doubt email and a lost claim at WARNING, a claim given back untried (not an
attempt) at DEBUG.

The fields (:data:`FIELDS`, listed in docs/operations.md) go on the record as ``extra=``: in JSON
mode they are top-level keys beside the record's own (``time``, ``level``, ``logger``, ``message``);
a field whose value is unknown is left out. :func:`email_fields` makes the four that every line about
one email carries, the other modules' lines too (a failover, an abandoned send, an internal error).
The message is made from the same fields, and only when a handler formats the record:
``sent key=order-1 via smtp attempt 1 250 id=4XYZ9 38 ms``.

Cheap by construction: nothing is built when the level is off; otherwise one dict per line and
the text made once per handler.
"""

from __future__ import annotations

import logging
from typing import Any

from ..delivery import Status
from ..store import OutcomeWrite
from .tally import Counted, Tally

log = logging.getLogger("outbox_mailer")

# every field a line may carry; the first four are always there
FIELDS = ("dedupe_key", "transport", "attempt", "outcome", "reply_code", "provider_message_id", "duration_ms",
          "retry_at", "error", "rescue")
GIVEN_BACK = "given_back"  # the outcome of a claim given back untried (not counted: not an attempt)
# the outcomes of lines about one email that other modules write before (or instead of) its write
ABANDONED = "abandoned"  # cut off by the shutdown grace period during its send: left 'sending' for a rescuer
FAILOVER = "failover"  # refused where it was not taken: due again at once, through a fallback
INTERNAL_ERROR = "internal_error"  # the send raised: recorded as failed
LEVELS = {Counted.SENT: logging.INFO, Counted.RETRIED: logging.INFO, None: logging.DEBUG}  # others: WARNING


class EmailLine:
    """The text of an email's line, made from its fields when a handler formats the record."""

    __slots__ = ("fields", "retry_seconds")

    def __init__(self, fields: dict[str, Any], retry_seconds: float | None) -> None:
        self.fields, self.retry_seconds = fields, retry_seconds

    def __str__(self) -> str:
        f = self.fields
        code = f.get("reply_code")
        text = (f"{f['outcome'].replace('_', ' ')} key={f['dedupe_key']} via {f['transport']} "
                f"attempt {f['attempt']} {'-' if code is None else code}")
        if "provider_message_id" in f:
            text += f" id={f['provider_message_id']}"
        if "duration_ms" in f:
            text += f" {f['duration_ms']:.0f} ms"
        if "rescue" in f:
            text += " (rescue)"
        if self.retry_seconds is not None:
            text += f", retry in {round(self.retry_seconds, 2):g} s"
        if "error" in f:
            text += f": {f['error']}"
        return text


def email_fields(dedupe_key: str, transport: str, attempt: int, outcome: str) -> dict[str, Any]:
    """The fields every line about one email carries (``extra=`` of a line about an attempt that is
    not its recorded write: :data:`ABANDONED`, :data:`FAILOVER`, :data:`INTERNAL_ERROR`)."""
    return {"dedupe_key": dedupe_key, "transport": transport, "attempt": attempt, "outcome": outcome}


def log_email(write: OutcomeWrite, tallied: Tally) -> None:
    """Log ``write`` as what it was recorded as (``tallied``)."""
    counted = tallied.counted
    level = LEVELS.get(counted, logging.WARNING)
    if not log.isEnabledFor(level):
        return
    d, t, a = write.delivery, write.transition, write.attempt
    fields = email_fields(d.dedupe_key, a.transport, a.attempt, GIVEN_BACK if counted is None else counted.value)
    if a.reply_code is not None:
        fields["reply_code"] = a.reply_code
    if counted is Counted.SENT and t.provider_message_id:
        fields["provider_message_id"] = t.provider_message_id
    if tallied.send_seconds is not None:
        fields["duration_ms"] = round(tallied.send_seconds * 1000, 1)
    retry_seconds = None
    if counted is Counted.RETRIED and t.scheduled_at is not None:
        fields["retry_at"] = t.scheduled_at.isoformat()
        retry_seconds = max(0.0, (t.scheduled_at - a.finished_at).total_seconds())
    if counted is Counted.CLAIM_LOST:
        fields["error"] = f"not applied: the row changed under us (the attempt was {a.outcome})"
    elif a.error and t.status is not Status.SENT:
        fields["error"] = a.error
    if a.rescue:
        fields["rescue"] = True
    log.log(level, EmailLine(fields, retry_seconds), extra=fields)
