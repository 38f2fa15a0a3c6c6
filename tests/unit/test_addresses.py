"""parse_address(): row strings to validated mailboxes; rendering for headers."""

from __future__ import annotations

import base64
import email.policy
import re
from email.parser import BytesParser

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from outbox_mailer.errors import CompositionError
from outbox_mailer.message.addresses import (
    SPECIAL_USE_ALLOWED,
    AddressPolicy,
    ParsedAddress,
    address_words,
    encoded_words,
    find_control_character,
    parse_address,
    parse_address_list,
)


@pytest.mark.parametrize("raw, name, addr_spec", [
    ("alice@example.com", "", "alice@example.com"),
    ("  alice@example.com  ", "", "alice@example.com"),
    ("<alice@example.com>", "", "alice@example.com"),
    ("Alice Example <alice@example.com>", "Alice Example", "alice@example.com"),
    ("Alice<alice@example.com>", "Alice", "alice@example.com"),
    ('"Example, Alice" <alice@example.com>', "Example, Alice", "alice@example.com"),
    ('"a \\"quoted\\" \\\\ name" <alice@example.com>', 'a "quoted" \\ name', "alice@example.com"),
    ('"<not@an.address>" <alice@example.com>', "<not@an.address>", "alice@example.com"),
    ('"  padded  " <alice@example.com>', "padded", "alice@example.com"),
    ("Jörg Müller <jorg@example.com>", "Jörg Müller", "jorg@example.com"),
    ("Dr. Who (Time Lord) <who@example.com>", "Dr. Who (Time Lord)", "who@example.com"),
    ("Alice.Example+tag@Example.COM", "", "Alice.Example+tag@example.com"),
    ("info@bücher.example.com", "", "info@xn--bcher-kva.example.com"),
    # RFC 6531: the local part stays UTF-8 (NFC), the domain becomes punycode
    ("jörg@example.com", "", "jörg@example.com"),
    ("Zoë <zoë@bücher.example.com>", "Zoë", "zoë@xn--bcher-kva.example.com"),
    ("東京@example.com", "", "東京@example.com"),
    ("jo\u0308rg@example.com", "", "jörg@example.com"),
])
def test_parse_address_accepts(raw: str, name: str, addr_spec: str) -> None:
    parsed = parse_address(raw, "to_addresses[0]")
    assert parsed.display_name == name
    assert parsed.addr_spec == addr_spec


def test_idn_domain_keeps_both_forms() -> None:
    parsed = parse_address("Zoë <zoe@Müller.example.org>", "to_addresses[0]")
    assert parsed == ParsedAddress("Zoë", "zoe", "müller.example.org", "xn--mller-kva.example.org")


@pytest.mark.parametrize("raw", [
    "a@localhost",  # dotless
    "a@example.test",  # special-use
    "a..b@example.com",
    "a@example.com, b@example.com",
    "Smith, John <j@example.com>",
    "John <j@example.com",
    "John j@example.com>",
    'Mr "x" <j@example.com>',
    '"unterminated <j@example.com>',
    '"a"b" <j@example.com>',
    '"trailing \\" <j@example.com>',
    "Eve <eve@example.com> <alice@example.com>",
    '"quoted"@example.com',
    "a@[192.0.2.1]",
    "",
    "<>",
    "a@example.com\r\nBcc: spy@example.org",
    "a@example.com\n",
    "Eve\u2028 <eve@example.com>",
    "Eve\x00 <eve@example.com>",
])
def test_parse_address_refuses(raw: str) -> None:
    with pytest.raises(CompositionError) as info:
        parse_address(raw, "cc_addresses[2]")
    assert info.value.field == "cc_addresses[2]"


def test_a_non_ascii_local_part_is_kept_as_utf8_for_smtputf8() -> None:
    parsed = parse_address("Jörg <jörg@example.com>", "from_address")
    assert (parsed.local_part, parsed.addr_spec) == ("jörg", "jörg@example.com")
    assert parsed.header_words[-1] == "<jörg@example.com>"  # raw UTF-8 in the header (RFC 6532)


def test_control_characters_are_refused_before_parsing() -> None:
    # parseaddr would cut this at the LF and quietly send to alice only.
    with pytest.raises(CompositionError, match="control character '\\\\n'"):
        parse_address("alice@example.com\nspy@example.org", "to_addresses[0]")


def test_parse_address_list_names_the_index() -> None:
    with pytest.raises(CompositionError) as info:
        parse_address_list(("a@example.com", "b@example.com", "bad"), "bcc_addresses")
    assert info.value.field == "bcc_addresses[2]"
    assert str(info.value).startswith("bcc_addresses[2]: invalid address 'bad': ")


@pytest.mark.parametrize("raw", [
    "Alice <alice@example.com>", "alice@example.com", "bad", "Eve <a..b@example.com>", "x <y",
    "N" * 600 + " <alice@example.com>",  # too long to be remembered
    "N" * 600 + " <bad>",
])
def test_parse_address_answers_the_same_every_time_whatever_the_field(raw: str) -> None:
    # Results are remembered per address string: the field is named in errors all the same.
    outcomes = []
    for field in ("to_addresses[0]", "cc_addresses[3]", "to_addresses[0]"):
        try:
            outcomes.append(parse_address(raw, field))
        except CompositionError as exc:
            assert exc.field == field
            assert str(exc) == f"{field}: {exc.reason}"
            outcomes.append(exc.reason)
    assert outcomes[0] == outcomes[1] == outcomes[2]


@pytest.mark.parametrize("raw, field", [
    ("a@example.com", "to_addresses"),
    (None, "to_addresses"),
    ((1,), "to_addresses[0]"),
])
def test_parse_address_list_type_errors(raw: object, field: str) -> None:
    with pytest.raises(CompositionError) as info:
        parse_address_list(raw, "to_addresses")
    assert info.value.field == field


@pytest.mark.parametrize("text, found", [
    ("plain", None), ("tab\there", "\t"), ("cr\r", "\r"), ("nel\x85", "\x85"),
    ("ls\u2028", "\u2028"), ("ps\u2029", "\u2029"), ("surrogate\ud800", "\ud800"),
    ("zero width joiner \u200d ok", None), ("Grüße 東京 🎉", None),
])
def test_find_control_character(text: str, found: str | None) -> None:
    assert find_control_character(text) == found


def test_address_words_quote_short_ascii_names() -> None:
    parsed = parse_address('"Shop, Inc." <shop@example.com>', "from_address")
    assert address_words(parsed) == ['"Shop, Inc."', "<shop@example.com>"]
    assert address_words(parse_address("shop@example.com", "from_address")) == ["shop@example.com"]


@pytest.mark.parametrize("name", ["Jörg Müller", "=?utf-8?q?x?=", "x" * 61, "東京" * 40])
def test_address_words_encode_other_names(name: str) -> None:
    parsed = ParsedAddress(name, "a", "example.com", "example.com")
    words = address_words(parsed)
    assert words[-1] == "<a@example.com>"
    assert all(re.fullmatch(r"=\?utf-8\?b\?[A-Za-z0-9+/=]+\?=", w) for w in words[:-1])
    assert all(len(w) <= 75 for w in words)


@pytest.mark.parametrize("text", ["a", "Grüße", "🎉" * 30, "東京 " * 50, "x" * 500])
def test_encoded_words_decode_back_exactly(text: str) -> None:
    words = encoded_words(text)
    assert all(len(w) <= 75 for w in words)
    header = ("Subject: " + "\r\n ".join(words) + "\r\n\r\n").encode("ascii")
    parsed = BytesParser(policy=email.policy.default).parsebytes(header)
    assert parsed["subject"] == text


def encoded_words_reference(text: str, chunk_bytes: int) -> list[str]:
    """Character by character: each word takes characters while their UTF-8 fits in chunk_bytes."""
    chunks: list[bytes] = []
    chunk = b""
    for char in text:
        encoded = char.encode("utf-8")
        if chunk and len(chunk) + len(encoded) > chunk_bytes:
            chunks.append(chunk)
            chunk = b""
        chunk += encoded
    chunks.append(chunk)
    return [f"=?utf-8?b?{base64.b64encode(c).decode('ascii')}?=" for c in chunks]


@settings(max_examples=300, deadline=None)
@given(
    text=st.one_of(
        st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=120),
        st.lists(st.sampled_from(["a", "é", "東", "🎉", " "]), max_size=80).map("".join),
    ),
    chunk_bytes=st.one_of(st.sampled_from([36, 45]), st.integers(4, 80)),
)
def test_encoded_words_split_between_characters_as_late_as_possible(text: str, chunk_bytes: int) -> None:
    assert encoded_words(text, chunk_bytes) == encoded_words_reference(text, chunk_bytes)


def test_encoded_words_need_room_for_a_character() -> None:
    with pytest.raises(ValueError):
        encoded_words("🎉", 3)


# -- special-use and internal domains (OUTBOX_MAILER_ALLOW_SPECIAL_USE_DOMAINS) ----------------

SPECIAL_USE = ["a@printer.local", "a@nas.home.arpa", "a@shop.example.test", "a@dev.localhost",
               "a@x.onion", "Shop <noreply@shop.example.test>"]
INTRANET = ["a@mail.internal", "a@host.lan", "a@db.corp"]  # no public DNS knows them, but nothing here can tell


@pytest.mark.parametrize("raw", SPECIAL_USE)
def test_special_use_domains_are_refused_by_default(raw: str) -> None:
    with pytest.raises(CompositionError) as info:
        parse_address(raw, "to_addresses[0]")
    assert info.value.field == "to_addresses[0]"


@pytest.mark.parametrize("raw", INTRANET)
def test_other_intranet_names_pass_either_way(raw: str) -> None:
    assert parse_address(raw, "to_addresses[0]").addr_spec == raw


@pytest.mark.parametrize("raw", [*SPECIAL_USE, *INTRANET])
def test_special_use_domains_pass_when_allowed(raw: str) -> None:
    parsed = parse_address(raw, "to_addresses[0]", SPECIAL_USE_ALLOWED)
    assert parsed.addr_spec == raw.rpartition("<")[2].rstrip(">")


@pytest.mark.parametrize("raw", ["a@example.invalid", "Shop <a@x.y.invalid>"])
def test_invalid_stays_refused_when_special_use_is_allowed(raw: str) -> None:
    with pytest.raises(CompositionError, match="special-use or reserved"):
        parse_address(raw, "from_address", SPECIAL_USE_ALLOWED)


@pytest.mark.parametrize("raw", ["a@intranet", "a@localhost", "a@10.0.0.1", "a@999"])
def test_a_domain_needs_a_dot_and_a_top_level_name_even_when_special_use_is_allowed(raw: str) -> None:
    with pytest.raises(CompositionError, match=r"period|top-level domain"):
        parse_address(raw, "to_addresses[0]", SPECIAL_USE_ALLOWED)


def test_two_policies_in_one_process_give_their_own_answers() -> None:
    strict, allowing = AddressPolicy(), AddressPolicy(allow_special_use_domains=True)
    with pytest.raises(CompositionError):
        parse_address("a@printer.local", "f", strict)
    assert parse_address("a@printer.local", "f", allowing).domain == "printer.local"  # remembered under its policy
    with pytest.raises(CompositionError):
        parse_address("a@printer.local", "f", strict)
    assert parse_address_list(["a@nas.home.arpa", "b@example.com"], "to", allowing)[0].domain == "nas.home.arpa"
    with pytest.raises(CompositionError, match=r"to\[0\]"):
        parse_address_list(["a@nas.home.arpa", "b@example.com"], "to", strict)


def test_an_internationalised_special_use_domain_keeps_its_forms_when_allowed() -> None:
    parsed = parse_address("zoë@bücher.local", "to", SPECIAL_USE_ALLOWED)
    assert (parsed.domain, parsed.ascii_domain, parsed.addr_spec) == (
        "bücher.local", "xn--bcher-kva.local", "zoë@xn--bcher-kva.local")


def test_loading_settings_that_allow_special_use_domains_leaves_email_validator_untouched(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import email_validator

    from outbox_mailer.settings.config import Settings

    before = list(email_validator.SPECIAL_USE_DOMAIN_NAMES)
    monkeypatch.setenv("OUTBOX_MAILER_ALLOW_SPECIAL_USE_DOMAINS", "true")
    settings = Settings(default_from="Shop <noreply@shop.example.test>")
    assert before == email_validator.SPECIAL_USE_DOMAIN_NAMES
    assert settings.address_policy() == SPECIAL_USE_ALLOWED
    with pytest.raises(CompositionError):  # a parse with the default policy still refuses them
        parse_address("a@shop.example.test", "f")
