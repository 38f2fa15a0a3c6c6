"""What SMTP replies mean for a message: pure functions, no I/O.

Both ways of sending (one command at a time, and pipelined) build their
outcomes here, so that a reply means the same whichever way it came.

Replies about our account, not the message (:func:`account_refusal`): the
server wants authentication, or will not relay for us. They are

* code 530 (RFC 4954 "authentication required") to MAIL, RCPT or DATA; or
* a 4xx/5xx reply to MAIL or RCPT whose enhanced code, when there is one, is
  of subject 7 (``x.7.y``, security or policy) and whose text says so:
  relaying denied / not permitted / not allowed / prohibited / refused,
  "unable to relay", "we do not relay", "authentication (is) required",
  "must authenticate". A bare ``550 5.7.1`` without those words ("refused by
  recipient's policy") stays the recipient's, and so does Postfix's ``550
  5.1.1 ... User unknown in relay recipient table`` (subject 1, not 7).

Such a refusal of MAIL, or of every recipient of a transaction, makes the
outcome transient, not charged, with a pause of the transport
(``pause_seconds``): no message of that transport can go out until the
configuration changes. When another recipient of the same transaction was
accepted, the server does take mail from us: the refusal is about that
recipient (a relay that serves some domains only) and stays in ``refused``.

Recipients refused with 452 (too many recipients, RFC 5321 section
4.5.3.1.10) are sent in further transactions of the same attempt (see
:mod:`.attempt`); :func:`follow_up` and :func:`with_refused` merge
their results into the first accepted transaction's outcome.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

from ...delivery import Cause, Outcome, OutcomeKind, RefusedRecipient
from ...delivery_events.status_codes import about_policy, first_enhanced_code
from ...providers.seam import AUTH_PAUSE_SECONDS, one_line

__all__ = [
    "TOO_MANY_RECIPIENTS",
    "accepted",
    "account_refusal",
    "all_refused",
    "ambiguous",
    "classify_reply",
    "follow_up",
    "queue_id",
    "refusal",
    "with_refused",
]

TOO_MANY_RECIPIENTS = 452  # RCPT: send this recipient in another transaction
_ACCOUNT_TEXT = re.compile(
    r"\brelay(?:ing)?\b(?:\s+\w+){0,2}?\s+(?:denied|not\s+permitted|not\s+allowed|prohibited|refused)"
    r"|\b(?:unable|not\s+allowed|not\s+permitted)\s+to\s+relay\b|\bdo(?:es)?\s+not\s+relay\b"
    r"|\bauthentication\s+(?:is\s+)?required|\bmust\s+(?:first\s+)?authenticate",
    re.IGNORECASE,
)

_ID_TOKEN = re.compile(r"[A-Za-z0-9._@+/-]{5,}")
_NAMED_ID = re.compile(r"(?:\bqueued\s+as|\bid=)\s*<?([A-Za-z0-9._@+/-]{5,})", re.IGNORECASE)
_ID_SEPARATORS = re.compile(r"[=:<>()\[\],;]")


def classify_reply(code: int, text: str) -> tuple[OutcomeKind, str | None]:
    """Kind of outcome a final SMTP reply means, and its RFC 3463 enhanced code.

    2xx: sent; 4xx (421 included): transient; 5xx: permanent. Anything else
    (1xx, 3xx, a malformed reply) neither accepted nor refused the message for
    good: transient. The enhanced code is the first word of the reply text when
    it has the form ``class.subject.detail``.
    """
    enhanced = first_enhanced_code(text)
    if 200 <= code < 300:
        return OutcomeKind.SENT, enhanced
    if 500 <= code < 600:
        return OutcomeKind.PERMANENT, enhanced
    return OutcomeKind.TRANSIENT, enhanced


def queue_id(reply_text: str) -> str | None:
    """The relay's queue id alone, from its reply after DATA: what its bounces and events name the
    message by (Postfix ``queued as X``, Exim ``id=X``, Amazon SES ``Ok <id>``); else the first token
    with a digit; None when there is none ("Great success")."""
    text = one_line(reply_text)
    named = _NAMED_ID.search(text)
    if named:
        return named[1][:255]
    words = text.split()
    if words and first_enhanced_code(words[0]) is not None:
        words = words[1:]
    for word in words:
        for token in _ID_SEPARATORS.split(word):
            if _ID_TOKEN.fullmatch(token) and any(c.isdigit() for c in token):
                return token[:255]
    return None


def account_refusal(code: int, text: str, *, envelope: bool = True) -> bool:
    """The reply refuses our account (authentication, relaying), not the message; see the module docstring.

    ``envelope``: the reply answered MAIL or RCPT (else DATA: only 530 counts).
    """
    if code == 530:
        return True
    if not envelope or not 400 <= code < 600:
        return False
    enhanced = first_enhanced_code(text)
    if enhanced is not None and not about_policy(enhanced):
        return False
    return _ACCOUNT_TEXT.search(text) is not None


def _account_refused(phase: str, code: int, text: str, refused: Iterable[RefusedRecipient]) -> Outcome:
    return Outcome.paused(
        f"{phase}: {code} {one_line(text)}: the server refuses mail from this account (authentication "
        f"required or relaying denied: check smtp.username and smtp.password); transport paused for "
        f"{AUTH_PAUSE_SECONDS:g} s",
        reply_code=code,
        enhanced_code=classify_reply(code, text)[1],
        refused=tuple(refused),
        pause_seconds=AUTH_PAUSE_SECONDS,
    )


def _describe(r: RefusedRecipient) -> str:
    if r.unknown:
        return f"<{r.address}>: may have been accepted ({r.message})"
    if r.reply_code is None:
        return f"<{r.address}>: not sent ({r.message})"
    return f"RCPT <{r.address}>: {r.reply_code} {r.message}"


def _refusals(refused: Iterable[RefusedRecipient], prefix: str) -> str:
    return prefix + "; ".join(_describe(r) for r in refused)


def refusal(phase: str, code: int, text: str, refused: Iterable[RefusedRecipient] = ()) -> Outcome:
    """A 4xx/5xx reply ended the transaction in ``phase``: not sent, by the reply code."""
    if account_refusal(code, text, envelope=not phase.startswith("DATA")):
        return _account_refused(phase, code, text, refused)
    kind, enhanced = classify_reply(code, text)
    return Outcome(
        Cause(kind),
        error=f"{phase}: {code} {one_line(text)}",
        reply_code=code,
        enhanced_code=enhanced,
        refused=tuple(refused),
    )


def all_refused(refused: list[RefusedRecipient]) -> Outcome:
    """Every recipient refused: transient when one refusal was, else permanent (a pause when about our account)."""
    for r in refused:
        if r.reply_code is not None and account_refusal(r.reply_code, r.message):
            return _account_refused(f"RCPT <{r.address}>", r.reply_code, r.message, refused)
    temporary = [r for r in refused if r.reply_code is not None and r.reply_code < 500]
    deciding = temporary[0] if temporary else refused[0]
    kind = OutcomeKind.TRANSIENT if temporary else OutcomeKind.PERMANENT
    return Outcome(
        Cause(kind),
        error=_refusals(refused, "" if len(refused) == 1 else "all recipients refused: "),
        reply_code=deciding.reply_code,
        enhanced_code=classify_reply(deciding.reply_code or 0, deciding.message)[1],
        refused=tuple(refused),
    )


def accepted(code: int, text: str, refused: list[RefusedRecipient]) -> Outcome:
    """250 after the message body: sent (to the recipients that were not refused)."""
    return Outcome(  # once per email: the cause's constructor and classify_reply() cost it a few µs more
        Cause.SENT,
        provider_message_id=queue_id(text),
        reply=one_line(f"{code} {text}"),
        error=_refusals(refused, "some recipients refused: ") if refused else None,
        reply_code=code,
        enhanced_code=first_enhanced_code(text),  # what classify_reply() gives with its kind
        refused=tuple(refused),
    )


def ambiguous(description: str, refused: Iterable[RefusedRecipient] = ()) -> Outcome:
    """No (usable) reply after the body went out: the server may have accepted it."""
    return Outcome.ambiguous(
        f"DATA: {description}; the server may have accepted the message", refused=tuple(refused)
    )


def follow_up(recipients: Iterable[str], outcome: Outcome) -> tuple[list[str], list[RefusedRecipient]]:
    """Which of a follow-up transaction's ``recipients`` got the message, and why the others did not.

    Sent: all but its refused ones. Otherwise nobody: a recipient refused at
    RCPT keeps that reply; the others take the transaction's reply code (a
    refused MAIL or DATA), or None when it broke before the body went out, or
    are ``unknown`` when the connection was lost after the body (ambiguous).
    """
    known = {r.address: r for r in outcome.refused}
    if outcome.kind is OutcomeKind.SENT:
        return [a for a in recipients if a not in known], list(outcome.refused)
    why = outcome.error or outcome.kind.value
    unknown = outcome.kind is OutcomeKind.AMBIGUOUS
    code = None if unknown else outcome.reply_code
    return [], [known.get(a) or RefusedRecipient(a, code, why, unknown=unknown) for a in recipients]


def with_refused(first: Outcome, refused: list[RefusedRecipient]) -> Outcome:
    """The first accepted transaction's outcome, with the refusals of the whole attempt."""
    error = _refusals(refused, "some recipients refused: ") if refused else None
    return replace(first, refused=tuple(refused), error=error)


def each_recipient(outcomes: list[tuple[str, Outcome]], untried: Iterable[str] = ()) -> Outcome:
    """One attempt made of one transaction per recipient (bounce tags per recipient), as one outcome.

    Someone got it: the first accepted transaction's outcome, every other recipient refused with
    its own transaction's reason (:func:`follow_up`: ``unknown`` when that one may have been
    accepted), so the retry goes to those alone. Nobody got it: the first transaction whose
    message may have been accepted decides (ambiguous), else the first that failed for now
    (transient, unreachable, paused), else the first refusal for good; with every recipient's
    reason. ``untried``: recipients no transaction was made for (the attempt stopped early).
    """
    first_sent: Outcome | None = None
    refused: list[RefusedRecipient] = []
    for address, outcome in outcomes:
        accepted, not_reached = follow_up((address,), outcome)
        if accepted and first_sent is None:
            first_sent = outcome
        refused.extend(not_reached)
    refused.extend(RefusedRecipient(a, None, "not tried: the attempt stopped before it") for a in untried)
    if first_sent is not None:
        return with_refused(first_sent, refused)
    causes = [o for _, o in outcomes]
    deciding = (next((o for o in causes if o.kind is OutcomeKind.AMBIGUOUS), None)
                or next((o for o in causes if o.kind is OutcomeKind.TRANSIENT), None) or causes[0])
    return replace(deciding, refused=tuple(refused))
