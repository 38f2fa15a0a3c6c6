"""The one table of RFC 3463 enhanced status codes: what a code says about the recipient's address.

Each class of the table with a code of its own; the SMTP transport's replies and the DSN parser read
the same table (tests/unit/test_smtp_classify.py, tests/unit/test_events_dsn.py).
"""

from __future__ import annotations

import pytest

from outbox_mailer.delivery_events.model import BounceClass
from outbox_mailer.delivery_events.status_codes import (
    about_policy,
    bounce_class,
    enhanced_code,
    first_enhanced_code,
    is_bad_mailbox,
)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("4.2.2", BounceClass.SOFT),  # any 4.x.x: temporary
        ("4.7.1", BounceClass.SOFT),
        ("5.2.2", BounceClass.SOFT),  # mailbox full
        ("5.2.3", BounceClass.SOFT),  # message too long for the mailbox
        ("5.3.1", BounceClass.SOFT),  # mail system full
        ("5.3.4", BounceClass.SOFT),  # message too big for the system
        ("5.4.7", BounceClass.SOFT),  # delivery time expired
        ("5.7.1", BounceClass.UNDETERMINED),  # policy: about the sender or the content
        ("5.7.26", BounceClass.UNDETERMINED),  # DMARC
        ("5.6.0", BounceClass.UNDETERMINED),  # media: about the message
        ("5.1.7", BounceClass.UNDETERMINED),  # our sender's address
        ("5.1.8", BounceClass.UNDETERMINED),
        ("2.0.0", BounceClass.UNDETERMINED),  # not a failure
        (None, BounceClass.UNDETERMINED),  # no code
        ("5.1.1", BounceClass.HARD),  # bad mailbox
        ("5.1.10", BounceClass.HARD),  # null MX
        ("5.2.1", BounceClass.HARD),  # mailbox disabled
        ("5.4.4", BounceClass.HARD),  # unable to route
        ("5.0.0", BounceClass.HARD),  # any other 5.x.x
    ],
)
def test_each_class_of_the_table_has_its_codes(code: str | None, expected: BounceClass) -> None:
    assert bounce_class(enhanced_code(code) if code else None) is expected


@pytest.mark.parametrize(
    ("code", "bad"),
    [
        ("5.1.1", True), ("5.1.10", True), ("5.1.2", True), ("5.1.3", True), ("5.1.6", True), (" 5.1.1 ", True),
        ("5.1.0", False), ("5.1.4", False), ("5.1.5", False), ("5.1.7", False), ("5.1.8", False),
        ("5.1.100", False), ("4.1.1", False), ("4.1.10", False), ("5.2.1", False), ("5.7.1", False),
        ("5.1.1.1", False), ("5.1", False), ("", False), ("x5.1.1", False), (None, False),
    ],
)
def test_only_permanent_addressing_codes_about_the_recipient_say_bad_mailbox(code: str | None, bad: bool) -> None:
    assert is_bad_mailbox(code) is bad


@pytest.mark.parametrize(
    ("code", "policy"),
    [("5.7.1", True), ("4.7.0", True), ("5.7.26", True), ("5.1.1", False), ("4.2.0", False), (None, False)],
)
def test_subject_7_is_security_or_policy(code: str | None, policy: bool) -> None:
    assert about_policy(code) is policy


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("5.1.1", (5, 1, 1)), (" 5.1.10 ", (5, 1, 10)), ("2.0.0", (2, 0, 0)), ("5.123.456", (5, 123, 456)),
        ("5.1.1234", None), ("1.2.3", None), ("5.1", None), ("5.1.1.1", None), ("x5.1.1", None), ("", None),
    ],
)
def test_a_code_is_class_subject_detail_of_class_2_4_or_5(text: str, expected: tuple[int, int, int] | None) -> None:
    assert enhanced_code(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("5.1.1 no such user", "5.1.1"), ("5.1.1\nsecond line", "5.1.1"), ("  4.7.0 throttled", "4.7.0"),
     ("5.1.1: glued", None), ("user 5.1.1 not first", None), ("", None)],
)
def test_a_reply_carries_its_code_as_its_first_word(text: str, expected: str | None) -> None:
    assert first_enhanced_code(text) == expected
