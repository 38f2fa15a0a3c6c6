"""SMTP reply classification: reply code decides, enhanced code is parsed from the text."""

from __future__ import annotations

import pytest

from outbox_mailer.delivery import ComposedMessage, OutcomeKind
from outbox_mailer.transports.smtp import _envelope_problem, _queue_id, classify_reply


@pytest.mark.parametrize(
    ("code", "text", "kind", "enhanced"),
    [
        (250, "2.0.0 Ok: queued as 4ABC12", OutcomeKind.SENT, "2.0.0"),
        (250, "OK", OutcomeKind.SENT, None),
        (251, "2.1.5 will forward", OutcomeKind.SENT, "2.1.5"),
        (421, "4.3.2 Service shutting down", OutcomeKind.TRANSIENT, "4.3.2"),
        (421, "mx.example.com closing connection", OutcomeKind.TRANSIENT, None),
        (450, "4.2.0 greylisted, come back later", OutcomeKind.TRANSIENT, "4.2.0"),
        (451, "4.3.0 local error", OutcomeKind.TRANSIENT, "4.3.0"),
        (452, "4.5.3 too many recipients", OutcomeKind.TRANSIENT, "4.5.3"),
        (550, "5.1.1 no such user", OutcomeKind.PERMANENT, "5.1.1"),
        (552, "5.3.4 message too big", OutcomeKind.PERMANENT, "5.3.4"),
        (554, "5.7.1 rejected as spam", OutcomeKind.PERMANENT, "5.7.1"),
        (554, "Transaction failed", OutcomeKind.PERMANENT, None),
        # The reply code decides, even when the enhanced code disagrees.
        (550, "4.2.2 mailbox full", OutcomeKind.PERMANENT, "4.2.2"),
        # Unexpected codes neither accept nor refuse for good.
        (354, "End data with <CR><LF>.<CR><LF>", OutcomeKind.TRANSIENT, None),
        (-1, "Malformed SMTP response line", OutcomeKind.TRANSIENT, None),
    ],
)
def test_classify_reply(code: int, text: str, kind: OutcomeKind, enhanced: str | None) -> None:
    assert classify_reply(code, text) == (kind, enhanced)


@pytest.mark.parametrize(
    ("text", "enhanced"),
    [
        ("5.1.1", "5.1.1"),  # nothing after the code
        ("5.123.456 long subject and detail", "5.123.456"),
        ("5.1.1\nsecond line of a multi-line reply", "5.1.1"),
        ("  5.1.1 leading blanks", "5.1.1"),
        ("5.1.1234 detail too long", None),
        ("5.1 too short", None),
        ("1.2.3 class must be 2, 4 or 5", None),
        ("5.1.1.1 extra part", None),
        ("x5.1.1 glued", None),
        ("5.1.1: punctuation glued", None),
        ("user 5.1.1 not first", None),
        ("", None),
    ],
)
def test_enhanced_code_is_the_first_word(text: str, enhanced: str | None) -> None:
    assert classify_reply(550, text)[1] == enhanced


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2.0.0 Ok: queued as 4XYZ12abc", "2.0.0 Ok: queued as 4XYZ12abc"),
        ("OK id=1kq2rT-0003Xy-7B", "OK id=1kq2rT-0003Xy-7B"),
        ("2.0.0 OK  1700000000 a1-20020a17.123 - gsmtp", "2.0.0 OK 1700000000 a1-20020a17.123 - gsmtp"),
        ("OK", None),
        ("2.0.0 OK", None),
        ("Message accepted for delivery", None),
    ],
)
def test_queue_id_only_when_the_reply_has_one(text: str, expected: str | None) -> None:
    assert _queue_id(text) == expected


def _message(sender: str = "app@example.com", *recipients: str) -> ComposedMessage:
    return ComposedMessage(sender, recipients or ("to@example.com",), "<id@example.com>", b"x\r\n")


@pytest.mark.parametrize(
    "message",
    [
        _message("app@example.com", "to@example.com\r\nRCPT TO:<evil@example.com>"),
        _message("app@example.com\r\nRCPT TO:<evil@example.com>"),
        _message("app@example.com", "Name <to@example.com>"),
        _message("app@example.com", "a@example.com, b@example.com"),
        _message("app@example.com", "to@example.com SIZE=1"),
        _message("app@example.com", "nobody"),
        ComposedMessage("app@example.com", (), "<id@example.com>", b"x\r\n"),
    ],
)
def test_envelope_problems_are_caught_before_any_io(message: ComposedMessage) -> None:
    assert _envelope_problem(message) is not None


def test_plain_envelopes_pass() -> None:
    assert _envelope_problem(_message("", "to@example.com")) is None  # null reverse-path
    assert _envelope_problem(_message("app@example.com", "a@example.com", '"john doe"@example.com')) is None
