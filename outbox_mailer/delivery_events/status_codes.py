"""What an RFC 3463 enhanced status code (``class.subject.detail``) says: the one table.

Pure. Read by the SMTP transport's replies (``transports/smtp/replies.py``: the code of a reply, a
policy refusal), by the bounces that come by mail (``dsn.py``: a bounce's class) and by the
recorder (a recipient refused at RCPT with a bad-mailbox code counts as a hard bounce).

==========================================  ==================  =====================================
code                                        bounce class        why
==========================================  ==================  =====================================
4.x.x                                       soft                temporary: the address is good
5.2.2 5.2.3 5.3.1 5.3.4 5.4.7               soft                mailbox or system full, message too
                                                                long or too big, delivery time expired
5.6.x 5.7.x                                 undetermined        media (about the message), security
                                                                or policy (spam, DMARC, blocklists:
                                                                about the sender or the content)
5.1.7 5.1.8                                 undetermined        our own sender's address
any other 5.x.x                             hard                the address cannot receive mail
none, 2.x.x                                 undetermined        not a failure code
==========================================  ==================  =====================================

Bad mailbox (:func:`is_bad_mailbox`): the permanent addressing codes about the recipient address
itself: 5.1.1 bad destination mailbox, 5.1.2 bad destination system (the domain does not exist or
accepts no mail), 5.1.3 bad destination address syntax, 5.1.6 mailbox moved with no forwarding
address, 5.1.10 null MX (RFC 7505). Not 5.1.0 (any "other address status": too vague to suppress
on), 5.1.4 (ambiguous, may resolve), 5.1.5 (valid), 5.1.7/5.1.8 (our sender), nor any 4.x.x.

Security or policy (:func:`about_policy`): subject 7, temporary or permanent.
"""

from __future__ import annotations

import re

from .model import BounceClass

__all__ = ["CODE_PATTERN", "Code", "about_policy", "bounce_class", "enhanced_code", "first_enhanced_code",
           "is_bad_mailbox"]

Code = tuple[int, int, int]  # (class, subject, detail)

# class 2, 4 or 5; subject and detail of 1 to 3 digits; not followed by a digit or another part. Its
# groups are the class, the subject and the detail (dsn.py finds codes inside Status and Diagnostic-Code).
CODE_PATTERN = r"([245])\.(\d{1,3})\.(\d{1,3})(?![\d.])"
_CODE = re.compile(CODE_PATTERN)

# (subject, detail) of 5.x.x failures
_SOFT = frozenset({(2, 2), (2, 3), (3, 1), (3, 4), (4, 7)})
_UNDETERMINED_SUBJECTS = frozenset({6, 7})
_UNDETERMINED = frozenset({(1, 7), (1, 8)})
_BAD_MAILBOX = frozenset({(1, 1), (1, 2), (1, 3), (1, 6), (1, 10)})
_POLICY_SUBJECT = 7


def enhanced_code(text: str | None) -> Code | None:
    """``text`` (outer blanks aside) as a code, or None when it is not one."""
    found = _CODE.fullmatch(text.strip()) if text is not None else None
    return (int(found[1]), int(found[2]), int(found[3])) if found is not None else None


def first_enhanced_code(reply_text: str) -> str | None:
    """The code an SMTP reply's text starts with (its first word, RFC 3463 section 2), as written."""
    words = reply_text.split(None, 1)
    return words[0] if words and enhanced_code(words[0]) is not None else None


def bounce_class(code: Code | None) -> BounceClass:
    """What a failure with this code says about the recipient's address (the table above)."""
    if code is None:
        return BounceClass.UNDETERMINED
    status_class, subject, detail = code
    if status_class == 4 or (status_class == 5 and (subject, detail) in _SOFT):
        return BounceClass.SOFT
    if status_class != 5 or subject in _UNDETERMINED_SUBJECTS or (subject, detail) in _UNDETERMINED:
        return BounceClass.UNDETERMINED
    return BounceClass.HARD


def is_bad_mailbox(code: str | None) -> bool:
    """Whether a code (of a relay's RCPT refusal) says the recipient address cannot exist."""
    parsed = enhanced_code(code)
    return parsed is not None and parsed[0] == 5 and parsed[1:] in _BAD_MAILBOX


def about_policy(code: str | None) -> bool:
    """Whether a code is of subject 7 (security or policy), temporary or permanent."""
    parsed = enhanced_code(code)
    return parsed is not None and parsed[1] == _POLICY_SUBJECT
