"""Suppressed addresses: one normal form, and a claimed row screened by what the claim found."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from outbox_mailer.delivery import Cause, Delivery
from outbox_mailer.delivery_events.suppression import normal_address, screen

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def row(to: tuple[str, ...], cc: tuple[str, ...] = (), bcc: tuple[str, ...] = (), *,
        suppressed: tuple[str, ...] = (), retry: tuple[str, ...] | None = None) -> Delivery:
    return Delivery(id=1, dedupe_key="k", claim_token=None, attempts=1, max_attempts=None, from_address=None,
                    to_addresses=to, cc_addresses=cc, bcc_addresses=bcc, reply_to=None, subject="s",
                    text_body="b", html_body=None, headers={}, attachments=[], metadata={}, transport=None,
                    priority=0, scheduled_at=NOW, expires_at=None, created_at=NOW, retry_recipients=retry,
                    suppressed=suppressed)


@pytest.mark.parametrize(("raw", "normal"), [
    ("Bob@Example.COM", "bob@example.com"),
    ("  Bob Smith <Bob@Example.com> ", "bob@example.com"),
    ("zoe\u0308@example.com", "zo\u00eb@example.com"),  # decomposed ë: one form (NFC)
    ("ZOË@Example.com", "zoË@example.com"),  # ASCII letters of the local part alone are lowered
    ("ΟΔΟΣ@example.com", "ΟΔΟΣ@example.com"),
    # the envelope's domain: what RCPT TO carries, whatever spelling the row or the event used
    ("zoe@\uff45xample.com", "zoe@example.com"),  # full-width e
    ("zoe@\uff25xample.com", "zoe@example.com"),  # full-width E
    ("zoe@example\u3002com", "zoe@example.com"),  # ideographic full stop
    ("zoë@EXÄMPLE.com", "zoë@xn--exmple-cua.com"),
    ("zoë@exämple.com", "zoë@xn--exmple-cua.com"),
    ("zoë@xn--exmple-cua.com", "zoë@xn--exmple-cua.com"),
    ("Zoë <zoë@XN--EXMPLE-CUA.com>", "zoë@xn--exmple-cua.com"),
])
def test_addresses_have_one_normal_form(raw: str, normal: str) -> None:
    assert normal_address(raw) == normal


@pytest.mark.parametrize("raw", ["", "no-at-sign", "@example.com", "bob@", "bo b@example.com",
                                 "bob@xn--invalid-.com"])
def test_what_is_not_an_address_is_refused(raw: str) -> None:
    with pytest.raises(ValueError):
        normal_address(raw)


def test_a_row_without_suppressed_recipients_is_unchanged() -> None:
    d = row(("a@example.com",))
    assert screen(d).delivery is d and screen(d).refusal is None


def test_a_row_whose_every_recipient_is_suppressed_fails_naming_address_reason_and_date() -> None:
    d = row(("A@example.com",), bcc=("Carol <c@example.com>",),
            suppressed=("a@example.com hard_bounce 2026-11-30", "c@example.com complaint 2026-10-01"))
    refusal = screen(d).refusal
    assert refusal is not None and refusal.cause is Cause.SUPPRESSED
    assert refusal.error == ("suppressed: a@example.com (hard_bounce since 2026-11-30); "
                             "c@example.com (complaint since 2026-10-01)")


def test_suppressed_cc_and_bcc_are_left_out_of_the_message_and_noted_for_the_attempt() -> None:
    d = row(("a@example.com",), cc=("B <b@example.com>",), bcc=("c@example.com", "D <D@example.com>"),
            suppressed=("b@example.com manual 2026-01-02", "d@example.com complaint 2026-01-03"))
    s = screen(d)
    assert s.refusal is None
    assert (s.delivery.to_addresses, s.delivery.cc_addresses, s.delivery.bcc_addresses) == (
        ("a@example.com",), (), ("c@example.com",)), "every transport builds its request from these"
    assert s.delivery.retry_recipients is None
    assert [(n.address, n.reply_code, n.message) for n in s.dropped] == [
        ("b@example.com", None, "suppressed: manual since 2026-01-02"),
        ("d@example.com", None, "suppressed: complaint since 2026-01-03")]


def test_a_suppressed_to_gives_its_place_to_the_first_cc_but_never_to_a_bcc() -> None:
    s = screen(row(("a@example.com",), cc=("b@example.com", "c@example.com"),
                   suppressed=("a@example.com hard_bounce 2026-11-30",)))
    assert (s.delivery.to_addresses, s.delivery.cc_addresses) == (("b@example.com",), ("c@example.com",))
    bcc_only = screen(row(("a@example.com",), bcc=("hidden@example.com",),
                          suppressed=("a@example.com hard_bounce 2026-11-30",)))
    assert bcc_only.refusal is not None, "a Bcc must not become a visible To"


def test_a_partial_retry_is_screened_among_the_recipients_still_owed() -> None:
    d = row(("a@example.com", "b@example.com"), retry=("b@example.com",),
            suppressed=("b@example.com hard_bounce 2026-11-30",))
    assert screen(d).refusal is not None
