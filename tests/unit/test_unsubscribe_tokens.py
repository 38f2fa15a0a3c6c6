"""One-click unsubscribe tokens (RFC 8058): signed with the first key, read with any listed key, valid for a
bounded number of days; anything forged, altered, truncated or too old reads as nothing."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from outbox_mailer.delivery_events.unsubscribe import CATEGORY, UnsubscribeKeys, Unsubscription, day_of

OLD, NEW = b"old-key-0123456789abcdef", b"new-key-0123456789abcdef"
NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
TODAY = day_of(NOW)
KEYS = UnsubscribeKeys([NEW], validity_days=365)


def token(keys: UnsubscribeKeys = KEYS, *, delivery_id: int = 42,
          address: str = "zoe@example.com", category: str = "newsletter", day: int = TODAY) -> str:
    return keys.token(delivery_id, address, category, day)


def test_a_token_reads_back_as_the_row_address_category_and_day_it_was_signed_for() -> None:
    keys = UnsubscribeKeys([NEW], validity_days=365)
    assert keys.read(token(keys, address="zoë@xn--exmple-cua.com"), TODAY) == Unsubscription(
        42, "zoë@xn--exmple-cua.com", "newsletter", TODAY)


def test_a_token_is_one_url_path_segment() -> None:
    t = token(address="zoë+news@xn--exmple-cua.com")
    assert set(t) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")


def test_the_first_key_signs_and_every_listed_key_verifies_until_it_is_removed() -> None:
    before = UnsubscribeKeys([OLD], validity_days=365)
    rotated = UnsubscribeKeys([NEW, OLD], validity_days=365)
    after = UnsubscribeKeys([NEW], validity_days=365)
    old_token = token(before)
    assert rotated.read(old_token, TODAY) is not None, "an old token verifies while its key is listed"
    assert after.read(old_token, TODAY) is None, "and not once the key is removed"
    assert after.read(token(rotated), TODAY) is not None, "the rotated set signs with its first key"


def test_a_token_stays_valid_for_its_validity_days_and_not_one_day_more() -> None:
    keys = UnsubscribeKeys([NEW], validity_days=365)
    issued = day_of(NOW - timedelta(days=365))
    assert keys.read(token(keys, day=issued), TODAY) is not None
    assert keys.read(token(keys, day=issued - 1), TODAY) is None
    assert keys.read(token(keys, day=TODAY + 2), TODAY) is None, "issued in the future: not ours"


def _altered(t: str, part: int, change: bytes) -> str:
    pieces = t.split(".")
    raw = base64.urlsafe_b64decode(pieces[part] + "=" * (-len(pieces[part]) % 4))
    pieces[part] = base64.urlsafe_b64encode(raw.replace(*change.split(b"|"))).rstrip(b"=").decode()
    return ".".join(pieces)


@pytest.mark.parametrize("forged", [
    pytest.param(lambda t: t[:-1], id="truncated"),
    pytest.param(lambda t: t[:-2] + ("AA" if not t.endswith("AA") else "BB"), id="wrong-mac"),
    pytest.param(lambda t: _altered(t, 1, b"newsletter|promotions"), id="altered-category"),
    pytest.param(lambda t: _altered(t, 1, b"zoe@|bob@"), id="altered-address"),
    pytest.param(lambda t: _altered(t, 1, b"42|43"), id="altered-row"),
    pytest.param(lambda t: "x" + t, id="unknown-key-id"),
    pytest.param(lambda t: t + ".x", id="extra-part"),
    pytest.param(lambda t: t.replace(".", ""), id="no-parts"),
    pytest.param(lambda t: "", id="empty"),
    pytest.param(lambda t: t + "A" * 2000, id="oversized"),
])
def test_a_forged_or_altered_token_reads_as_nothing(forged: object) -> None:
    keys = UnsubscribeKeys([NEW], validity_days=365)
    assert callable(forged)
    assert keys.read(forged(token(keys)), TODAY) is None


def test_a_token_signed_with_another_key_reads_as_nothing() -> None:
    other = UnsubscribeKeys([b"another-key-0123456789ab"], validity_days=365)
    assert UnsubscribeKeys([NEW], validity_days=365).read(token(other), TODAY) is None


@given(st.text(max_size=300))
def test_no_string_reads_as_a_token_unless_it_was_signed(text: str) -> None:
    assert UnsubscribeKeys([NEW], validity_days=365).read(text, TODAY) is None


@pytest.mark.parametrize(("category", "valid"), [
    ("newsletter", True), ("product-updates", True), ("a", True), ("x" * 64, True), ("v1.2_b", True),
    ("", False), ("x" * 65, False), ("News", False), ("-lead", False), ("a b", False), ("caf\u00e9", False),
])
def test_a_category_is_1_to_64_of_lower_case_letters_digits_dot_underscore_hyphen(category: str, valid: bool) -> None:
    assert (CATEGORY.fullmatch(category) is not None) is valid


def test_every_attempt_of_a_row_carries_the_same_link_whatever_day_it_is_sent() -> None:
    """A retry or a rescue days later composes the same List-Unsubscribe: the bytes of a row's message do not
    move with the day (a rescued batch is resent only when its digest matches)."""
    from outbox_mailer.delivery import Delivery
    from outbox_mailer.delivery_events.unsubscribe import UnsubscribeLinks
    from tests.daemon_fakes import make_delivery

    links = UnsubscribeLinks("https://mail.example.com", KEYS)
    row = make_delivery(1, to_addresses=("zoe@example.com",), unsubscribe_category="newsletter",
                        created_at=NOW - timedelta(days=3))
    first, later = links.added(row, NOW), links.added(row, NOW + timedelta(days=40))
    assert isinstance(first, Delivery) and isinstance(later, Delivery)
    assert first.headers["List-Unsubscribe"] == later.headers["List-Unsubscribe"]
    read = KEYS.read(first.headers["List-Unsubscribe"].rsplit("/", 1)[1].rstrip(">"), TODAY)
    assert read is not None and read.issued == day_of(NOW - timedelta(days=3)), "dated by the row's creation"
