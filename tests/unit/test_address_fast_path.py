"""The address fast path gives exactly what email_validator gives (property-based).

outbox_mailer.message.addresses validates the common addresses (an ASCII dot-atom local
part) without calling email_validator per address: the domain is checked once
per distinct domain, the local part by a regular expression.  These tests show,
against email_validator itself (called here directly, as the code did before the
fast path existed), that for any generated address:

* whenever the fast path answers, email_validator accepts the address with the
  same local part, domain and ASCII domain;
* the combined check (fast path, else email_validator) accepts and refuses
  exactly the same addresses, with the same results and the same error text;
* parse_address() turns all of that into the same ParsedAddress or the same
  CompositionError (field and message).

The example count (for each of four strategies) is OUTBOX_ADDRESS_EXAMPLES (default 500).
"""

from __future__ import annotations

import os

import pytest
from email_validator import EmailNotValidError, validate_email
from email_validator.syntax import validate_email_domain_name
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from outbox_mailer.errors import CompositionError
from outbox_mailer.message import addresses
from outbox_mailer.message.addresses import ParsedAddress, parse_address

EXAMPLES = int(os.environ.get("OUTBOX_ADDRESS_EXAMPLES", "500"))


ATEXT = "abcxyzABCXYZ0189!#$%&'*+/=?^_`{|}~-"

# -- the reference: email_validator as compose() called it before the fast path --


def reference(addr: str) -> tuple[str, str, str] | str:
    """The validated fields, or the refusal's message."""
    try:
        result = validate_email(addr, check_deliverability=False)
    except EmailNotValidError as exc:
        return f"refused: {exc}"
    return result.local_part, result.domain, result.ascii_domain


def combined(addr: str) -> tuple[str, str, str] | str:
    """The module's check (fast path, else email_validator)."""
    try:
        return addresses._validate_email(addr)
    except EmailNotValidError as exc:
        return f"refused: {exc}"


def reference_parse(addr: str, field: str) -> ParsedAddress | tuple[str, str]:
    """What parse_address(addr) must give for a bare address (restated from the module's rules)."""
    want = reference(addr)
    if isinstance(want, str):
        return field, f"{field}: invalid address {addr!r}: {want.removeprefix('refused: ')}"
    local, domain, ascii_domain = want
    return ParsedAddress("", local, domain, ascii_domain)


# -- strategies ---------------------------------------------------------------------

ROLE_NAMES = ["postmaster", "PostMaster", "INFO", "Www", "abuse", "noc", "Sales", "hostmaster.x", "info+x"]
ODD_LOCALS = [
    "", ".", "a.", ".a", "a..b", "a.b", "a" * 63, "a" * 64, "a" * 65, "b" * 100, '"quoted"', '"a b"',
    '"a@b"', '"a\\"b"', '"a..b"', '"postmaster"', "a b", "a(b)", "a,b", "a;b", "a:b", "a\\b", "a<b",
    "a>b", "a[b]", "jörg", "Jörg", "e\u0301", "\u01c5", "\u212a", "\ufb01", "东京", "a\u00a0b", "a\u200db",
    "\u0301a", "ß", "İ", "a@b", "@",
]
NEAR_MISS_CHARS = [
    ".", " ", '"', "(", ")", ",", ":", ";", "<", ">", "@", "[", "]", "\\", "\x7f", "ü", "é", "ß", "\u212a",
    "\u0301", "\u00a0", "\u200b", "\uff0e", "\uff20", "\U0001f600",
]
LABELS = [
    "example", "Example", "EXAMPLE", "mail", "a", "a1", "1a", "123", "a-b", "a--b", "ab--cd", "-a", "a-",
    "xn--bcher-kva", "xn--zz", "XN--BCHER-KVA", "xn--", "bücher", "Müller", "例え", "παράδειγμα",
    "אב", "١٢", "ß", "straße", "ﬁ", "ÄÖ", "a\u0301", "\u0301a", "a_b", "a b", "a!b", "x" * 63,
    "y" * 64, "ü" * 30, "", "localhost", "local", "invalid", "test", "onion", "arpa", "example",
]
TLDS = [
    "com", "org", "net", "COM", "de", "io", "local", "localhost", "invalid", "test", "onion", "arpa",
    "example", "123", "1com", "c0m", "x1", "中国", "xn--fiqs8s", "рф", "com.", "", "a",
]
SEPARATORS = [".", ".", ".", ".", "..", "\uff0e", "\u3002", "@"]
LITERALS = ["[192.0.2.1]", "[IPv6:::1]", "[ipv6:2001:db8::1]", "[300.1.1.1]", "[x:y]", "[1.2.3]"]


GOOD_LABELS = ["example", "Example", "mail", "a", "a1", "1a", "123", "a-b", "a--b", "xn--bcher-kva",
               "bücher", "Müller", "例え", "παράδειγμα", "straße", "x" * 63]
GOOD_TLDS = ["com", "org", "COM", "de", "io", "中国", "xn--fiqs8s", "рф"]


@st.composite
def domains(draw: st.DrawFn) -> str:
    if draw(st.integers(0, 30)) == 0:
        return draw(st.sampled_from(LITERALS))
    if draw(st.booleans()):  # mostly valid: plain, IDN and Punycode labels
        labels = draw(st.lists(st.one_of(
            st.sampled_from(GOOD_LABELS),
            st.from_regex(r"[a-zA-Z0-9]([a-zA-Z0-9-]{0,10}[a-zA-Z0-9])?", fullmatch=True),
        ), min_size=1, max_size=3))
        return ".".join([*labels, draw(st.sampled_from(GOOD_TLDS))])
    labels = draw(st.lists(st.one_of(
        st.sampled_from(LABELS),
        st.from_regex(r"[a-zA-Z0-9][a-zA-Z0-9-]{0,12}[a-zA-Z0-9]?", fullmatch=True),
        st.text(alphabet="abü例-.1_ ", max_size=8),
    ), max_size=4))
    parts = [labels[0]] if labels else []
    for label in labels[1:]:
        parts += [draw(st.sampled_from(SEPARATORS)), label]
    tld = draw(st.sampled_from(TLDS))
    domain = "".join(parts) + ("." if parts else "") + tld
    if draw(st.integers(0, 10)) == 0:
        domain = draw(st.sampled_from([".", "-", " ", "", "@"])) + domain
    return domain


@st.composite
def local_parts(draw: st.DrawFn) -> str:
    dot_atom = st.from_regex(rf"[{ATEXT}]{{1,20}}(\.[{ATEXT}]{{1,10}}){{0,3}}", fullmatch=True)
    # A dot-atom with one character that has no place there (or a dot out of place).
    near_miss = st.tuples(dot_atom, st.sampled_from(NEAR_MISS_CHARS), st.integers(0, 40)).map(
        lambda t: t[0][: t[2]] + t[1] + t[0][t[2]:])
    return draw(st.one_of(
        dot_atom,
        dot_atom,
        near_miss,
        near_miss,
        st.sampled_from(ROLE_NAMES),
        st.sampled_from(ODD_LOCALS),
        st.text(alphabet=ATEXT + ".\"\\ @<>()ü", min_size=0, max_size=12),
        st.integers(55, 70).map(lambda n: "a." * (n // 2) + "z" * (n % 2 + 1)),
    ))


LONG_LABELS = ["a" * 63, "a" * 62, "a" * 64, "a" * 20, "bücher", "Müller", "例え", "例" * 20, "ü" * 5,
               "xn--bcher-kva", "ÄÖ", "ß" * 10,
               # Longer as given than normalised (U+FB01 LATIN SMALL LIGATURE FI), and the other
               # way round (U+01C6 DZ WITH CARON, U+3310 SQUARE GIGA, U+3300 SQUARE APAATO).
               "ﬁ", "\u01c6" * 10, "\u3310" * 10, "\u3300" * 2]


def longest_form(domain: str) -> int:
    """The longest of the domain as given, normalised and in ASCII (UTF-8 bytes), as email_validator
    counts them; for a refused domain, more than any address may have."""
    try:  # the domain check alone: no total length limit yet
        result = validate_email_domain_name(domain)
    except EmailNotValidError:
        return 1000
    return max(len(domain.encode()), len(result["domain"].encode()), len(result["ascii_domain"]))


@st.composite
def long_addresses(draw: st.DrawFn) -> str:
    """Addresses around email_validator's limits: 254 for the whole address (as given,
    normalised and in ASCII, in UTF-8 bytes), 253 for the domain, 63 for a label.
    IDN labels make the three forms differ in length, so each can be the longest."""
    label = draw(st.sampled_from(LONG_LABELS))
    most = max(1, (253 - 4) // (longest_form(label + ".com") - 3))  # labels (and dots) that fit
    count = draw(st.one_of(st.integers(1, most + 2), st.integers(max(1, most - 3), most + 1)))
    domain = ".".join([label] * count + ["com"])
    # A local part that puts the address right at the limit (up to 64 characters: the fast path's).
    local_size = max(1, 254 - 1 - longest_form(domain) + draw(st.sampled_from([0, 1, 1, -1, 2, -3, 3])))
    return f"{'l' * local_size}@{domain}"


GOOD_DOMAINS = st.sampled_from(["example.com", "Example.COM", "mail.example.org", "bücher.example.com",
                                "xn--bcher-kva.example.com", "例え.example.com", "a.b.c.d.io"])
SIMPLE_LOCALS = st.one_of(st.from_regex(r"[a-zA-Z0-9._+-]{1,12}", fullmatch=True), st.sampled_from(ROLE_NAMES))
ADDRESSES = {  # the whole address space, and each part varied on its own
    "local parts": st.builds(lambda local, domain: f"{local}@{domain}", local_parts(), GOOD_DOMAINS),
    "domains": st.builds(lambda local, domain: f"{local}@{domain}", SIMPLE_LOCALS, domains()),
    "lengths": long_addresses(),
    "anything": st.one_of(
        st.builds(lambda local, domain: f"{local}@{domain}", local_parts(), domains()),
        st.text(alphabet=ATEXT + ".@ü", max_size=20),  # no @-sign, or several
    ),
}


# -- properties -----------------------------------------------------------------------


def check_address(addr: str) -> None:
    want = reference(addr)
    fast = addresses._validate_fast(addr)
    event(("refused" if isinstance(want, str) else "accepted") + (" by the fast path" if fast else " by the full check"))
    if fast is not None:
        assert fast == want
    assert combined(addr) == want
    field = "to_addresses[0]"
    expected = reference_parse(addr, field)
    if addr != addr.strip() or addresses.find_control_character(addr) or "<" in addr or ">" in addr:
        return  # parse_address refuses or rewrites these before validation; not this test's subject
    try:
        got: ParsedAddress | tuple[str, str] = parse_address(addr, field)
    except CompositionError as exc:
        got = exc.field, str(exc)
    assert got == expected


@pytest.mark.parametrize("kind", list(ADDRESSES))
def test_fast_path_agrees_with_email_validator(kind: str) -> None:
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(addr=ADDRESSES[kind])
    def check(addr: str) -> None:
        check_address(addr)

    check()


@pytest.mark.parametrize("addr, expected", [
    ("alice@example.com", ("alice", "example.com", "example.com")),
    ("Alice.Example+tag@Example.COM", ("Alice.Example+tag", "example.com", "example.com")),
    ("PostMaster@example.org", ("postmaster", "example.org", "example.org")),
    ("info@bücher.example.com", ("info", "bücher.example.com", "xn--bcher-kva.example.com")),
    ("x@xn--bcher-kva.example.com", ("x", "bücher.example.com", "xn--bcher-kva.example.com")),
    ("!#$%&'*+/=?^_`{|}~-@example.com", ("!#$%&'*+/=?^_`{|}~-", "example.com", "example.com")),
    ("a" * 64 + "@example.com", ("a" * 64, "example.com", "example.com")),
])
def test_common_addresses_take_the_fast_path(addr: str, expected: tuple[str, str, str]) -> None:
    assert addresses._validate_fast(addr) == expected == reference(addr)


@pytest.mark.parametrize("addr", [
    "a..b@example.com", ".a@example.com", "a.@example.com", '"quoted"@example.com', "jörg@example.com",
    "a" * 65 + "@example.com", "a@localhost", "a@example.local", "a@example.invalid", "a@example.test",
    "a@example.123", "a@example.com.", "a@[192.0.2.1]", "a@b@example.com", "a@", "@example.com", "a",
    "l" * 64 + "@" + ".".join(["a" * 63] * 3) + ".com",  # 260 characters
])
def test_other_addresses_take_the_full_check(addr: str) -> None:
    assert addresses._validate_fast(addr) is None
    assert combined(addr) == reference(addr)


@pytest.mark.parametrize("label", [
    "a" * 63,  # all three forms alike
    "例" * 20,  # the ASCII form is the shortest
    "ﬁ",  # longest as given (normalised to "fi")
    "\u3310" * 10,  # longest normalised (SQUARE GIGA becomes two katakana)
    "bücher",  # longest in ASCII (xn--bcher-kva)
])
def test_the_length_limit_counts_every_form(label: str) -> None:
    labels = [label]
    while longest_form(".".join([*labels, label, "com"])) <= 250:
        labels.append(label)
    domain = ".".join([*labels, "com"])
    at_limit = "l" * (254 - 1 - longest_form(domain)) + "@" + domain
    assert len(at_limit.partition("@")[0]) <= 64
    for addr in (at_limit, "l" + at_limit):
        assert combined(addr) == reference(addr)
    assert addresses._validate_fast(at_limit) == reference(at_limit)
    assert isinstance(reference("l" + at_limit), str)  # refused: one byte too long
    assert addresses._validate_fast("l" + at_limit) is None


def test_refusals_name_the_field_and_keep_the_message() -> None:
    with pytest.raises(CompositionError) as info:
        parse_address("a@example.invalid", "cc_addresses[1]")
    assert info.value.field == "cc_addresses[1]"
    assert str(info.value) == reference_parse("a@example.invalid", "cc_addresses[1]")[1]
