"""Bounce address tags: short, ASCII, verifiable under the current or the previous key, for a while."""

from __future__ import annotations

import pytest

from outbox_mailer.delivery_events.bounce_tags import MAX_AGE_DAYS, MAX_LOCAL_OCTETS, BounceAddress, BounceTag, Unproven
from outbox_mailer.errors import ConfigurationError
from outbox_mailer.settings.config import Settings

KEY, OLD = b"k" * 32, b"o" * 32
DAY = 20_800


def test_the_tagged_sender_is_ascii_and_fits_a_64_octet_local_part_at_the_largest_values() -> None:
    tags = BounceAddress("b" * MAX_LOCAL_OCTETS + "@example.com", [KEY])
    sender = tags.sender(2**63 - 1, 36**4 - 1, 36**4 - 1)
    local = sender.rpartition("@")[0]
    assert sender.isascii() and len(local) == 64 and sender.endswith("@example.com")


def test_a_tag_names_the_row_and_the_recipient_and_never_the_address() -> None:
    tags = BounceAddress("bounces@example.com", [KEY])
    sender = tags.sender(42, 3, DAY)
    assert tags.read(sender, DAY) == BounceTag(42, 3, DAY)
    assert tags.read(f"<{sender.upper()}>", DAY + 2) == BounceTag(42, 3, DAY), "an MTA may fold case"


def test_a_tag_verifies_under_the_previous_key_after_a_rotation_and_not_under_another() -> None:
    old_sender = BounceAddress("bounces@example.com", [OLD]).sender(7, 0, DAY)
    assert BounceAddress("bounces@example.com", [KEY, OLD]).read(old_sender, DAY) == BounceTag(7, 0, DAY)
    assert BounceAddress("bounces@example.com", [KEY]).read(old_sender, DAY) is Unproven.FORGED


@pytest.mark.parametrize("today, proven", [(DAY + MAX_AGE_DAYS, True), (DAY + MAX_AGE_DAYS + 1, False),
                                           (DAY - 1, True), (DAY - 2, False)])
def test_a_tag_verifies_from_its_day_for_a_while_only(today: int, proven: bool) -> None:
    tags = BounceAddress("bounces@example.com", [KEY])
    assert (tags.read(tags.sender(7, 1, DAY), today) != Unproven.FORGED) is proven


def test_an_edited_or_invented_tag_is_forged_and_our_plain_address_is_untagged() -> None:
    tags = BounceAddress("bounces@example.com", [KEY])
    sender = tags.sender(42, 3, DAY)
    assert tags.read(sender.replace(".3.", ".4."), DAY) is Unproven.FORGED
    assert tags.read("bounces+anything@example.com", DAY) is Unproven.FORGED
    assert tags.read("bounces@example.com", DAY) is Unproven.UNTAGGED
    assert tags.read("someone@example.com", DAY) is Unproven.UNTAGGED


@pytest.mark.parametrize("env, fragment", [
    ({"OUTBOX_MAILER_BOUNCES__ADDRESS": "bounces@example.com"}, "together"),
    ({"OUTBOX_MAILER_BOUNCES__ADDRESS": "b+x@example.com", "OUTBOX_MAILER_BOUNCES__KEY": "k" * 16}, "'+'"),
    ({"OUTBOX_MAILER_BOUNCES__ADDRESS": "b" * 24 + "@example.com", "OUTBOX_MAILER_BOUNCES__KEY": "k" * 16}, "fits"),
    ({"OUTBOX_MAILER_BOUNCES__ADDRESS": "bounces@example.com", "OUTBOX_MAILER_BOUNCES__KEY": "short"}, "short"),
    ({"OUTBOX_MAILER_BOUNCES__PER_RECIPIENT": "true"}, "PER_RECIPIENT"),
])
def test_bounce_settings_are_checked_at_start_up(monkeypatch: pytest.MonkeyPatch, env: dict[str, str],
                                                 fragment: str) -> None:
    from outbox_mailer.settings.config import load_settings

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError, match="OUTBOX_MAILER_BOUNCES") as caught:
        load_settings()
    assert fragment in str(caught.value)


def test_no_bounce_address_means_no_tags() -> None:
    assert Settings().bounces.tags() is None
