"""Every provider's parser refuses a body that is not JSON, deeply nested JSON included, as Malformed (400), never a crash."""

from __future__ import annotations

import pytest

from outbox_mailer.delivery_events import mailgun, postmark, resend, sendgrid
from outbox_mailer.delivery_events.model import Malformed, iso_time

PARSERS = {"resend": lambda b: resend.parse(b, "msg_1"), "postmark": postmark.parse, "sendgrid": sendgrid.parse,
           "mailgun": mailgun.parse}


@pytest.mark.parametrize("provider", PARSERS)
@pytest.mark.parametrize("body", [b"{not json", b"\xff\xfe", b"[" * 100_000 + b"]" * 100_000], ids=["text", "bytes", "deep"])
def test_a_body_that_is_not_json_is_malformed(provider: str, body: bytes) -> None:
    with pytest.raises(Malformed):
        PARSERS[provider](body)


def test_iso_times_are_timezone_aware() -> None:
    assert iso_time("2026-12-01T12:00:00").utcoffset().total_seconds() == 0  # type: ignore[union-attr]
    assert iso_time("2026-12-01T12:00:00-04:00").utcoffset().total_seconds() == -4 * 3600  # type: ignore[union-attr]
    assert iso_time("yesterday") is None and iso_time(17) is None
