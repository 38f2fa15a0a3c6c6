"""What SMTP replies mean for a message: pure functions, no I/O.

Both ways of sending (one command at a time, and pipelined) build their
outcomes here, so that a reply means the same whichever way it came.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..delivery import Outcome, OutcomeKind, RefusedRecipient

__all__ = ["accepted", "all_refused", "ambiguous", "classify_reply", "one_line", "queue_id", "refusal"]

# RFC 3463 status code: class.subject.detail, class 2, 4 or 5.
_ENHANCED_CODE = re.compile(r"[245]\.\d{1,3}\.\d{1,3}")
_ID_TOKEN = re.compile(r"[A-Za-z0-9._@+/-]{5,}")
_MAX_TEXT = 400


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


def one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _MAX_TEXT else line[: _MAX_TEXT - 3] + "..."


def queue_id(reply_text: str) -> str | None:
    """The reply text after DATA when it carries a queue id (a token with a digit)."""
    words = one_line(reply_text).split()
    if words and _ENHANCED_CODE.fullmatch(words[0]):
        words = words[1:]
    for word in words:
        for token in re.split(r"[=:<>()\[\],;]", word):
            if _ID_TOKEN.fullmatch(token) and any(c.isdigit() for c in token):
                return one_line(reply_text)[:255]
    return None


def _refusals(refused: Iterable[RefusedRecipient], prefix: str) -> str:
    return prefix + "; ".join(f"RCPT <{r.address}>: {r.reply_code} {r.message}" for r in refused)


def refusal(phase: str, code: int, text: str, refused: Iterable[RefusedRecipient] = ()) -> Outcome:
    """A 4xx/5xx reply ended the transaction in ``phase``: not sent, by the reply code."""
    kind, enhanced = classify_reply(code, text)
    return Outcome(
        kind,
        error=f"{phase}: {code} {one_line(text)}",
        reply_code=code,
        enhanced_code=enhanced,
        refused=tuple(refused),
    )


def all_refused(refused: list[RefusedRecipient]) -> Outcome:
    """Every recipient refused: transient when one refusal was, else permanent."""
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


def accepted(code: int, text: str, refused: list[RefusedRecipient]) -> Outcome:
    """250 after the message body: sent (to the recipients that were not refused)."""
    return Outcome.sent(
        provider_message_id=queue_id(text),
        error=_refusals(refused, "some recipients refused: ") if refused else None,
        reply_code=code,
        enhanced_code=classify_reply(code, text)[1],
        refused=tuple(refused),
    )


def ambiguous(description: str, refused: Iterable[RefusedRecipient] = ()) -> Outcome:
    """No (usable) reply after the body went out: the server may have accepted it."""
    return Outcome.ambiguous(
        f"DATA: {description}; the server may have accepted the message", refused=tuple(refused)
    )
