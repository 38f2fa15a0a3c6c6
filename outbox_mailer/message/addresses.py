"""Email addresses as rows give them: parsed, validated, made safe for SMTP.

A row's address fields hold either a bare ``addr@example.com`` or a
``Display Name <addr@example.com>`` (the name may be quoted and may be
non-ASCII).  :func:`parse_address` turns one of them into a
:class:`ParsedAddress` or raises :class:`~outbox_mailer.errors.CompositionError`
naming the field.

Rules, and why:

* Control characters are refused *before* any parsing: ``email.utils.parseaddr``
  silently cuts a string at CR/LF, so a smuggled recipient would otherwise
  vanish instead of failing loudly.
* The addr-spec is checked by ``email_validator`` without DNS.  The common
  case (an ASCII dot-atom local part) takes a fast path that validates each
  distinct domain once and the local part with a regular expression; its
  results are identical to the full check's (see :func:`_validate_fast`).
* Domains become punycode (IDN).  A non-ASCII local part (RFC 6531/6532)
  is kept as UTF-8: the address then needs a server offering SMTPUTF8
  (the SMTP transport checks) and is written raw into UTF-8 headers.
* Special-use and reserved domains (email-validator's list, from RFC 6761:
  ``.test``, ``.local``, ``.localhost``, ``.onion``, all of ``.arpa`` with
  ``.home.arpa``, ``.invalid``) are refused unless the :class:`AddressPolicy`
  passed in allows them (the settings build it from
  ``OUTBOX_MAILER_ALLOW_SPECIAL_USE_DOMAINS``: ``Settings.address_policy()``);
  ``.invalid`` is refused always, since it can never be delivered.
  email-validator has no per-call option for its list (``test_environment``
  lets ``.test`` alone through), and its list is left as shipped: an address
  it refuses is checked again with a stand-in top-level name after the
  domain, and accepted when that passes and the domain's own top-level name
  is one of the list's (the forms returned are the domain's own).  Other
  top-level names intranets use (``.internal``, ``.lan``, ``.corp``) pass
  either way: nothing here knows which names the public DNS
  delegates.  A domain needs a dot and a top-level name that is not numeric,
  setting or not (``a@10.0.0.1`` is refused: an IP address is a domain literal).
* An unquoted display name may not hold ``< > @ , ; : " \\`` (it would be
  ambiguous); quote it to use them.  The name is kept as text and re-rendered,
  never copied into a header verbatim.

A :class:`ParsedAddress` is rendered once, when it is made, into the forms the
composer uses (addr-spec, display form, header words), so composition reads
them and calls nothing here again.  The header words (:func:`address_words`):
the name as one quoted string, or as RFC 2047 encoded words
(:func:`encoded_words`) when it is non-ASCII, long, or contains ``=?``; the addr-spec always in ASCII.
:func:`find_control_character` is shared with the composer for every other
header-bound string.
"""

from __future__ import annotations

import binascii
import re
import string
from dataclasses import dataclass, field
from functools import lru_cache

import email_validator
from email_validator import EmailNotValidError, ValidatedEmail, validate_email
from email_validator.rfc_constants import (
    CASE_INSENSITIVE_MAILBOX_NAMES,
    DOMAIN_MAX_LENGTH,
    EMAIL_MAX_LENGTH,
)

from ..delivery import quick_init
from ..errors import CompositionError

# Cc: C0/C1 controls (CR, LF, TAB, NUL, NEL ...); Zl/Zp: U+2028/U+2029, which
# str.splitlines() treats as line breaks; Cs: lone surrogates, not encodable.
# As a character class (these categories are closed sets; a test compares the
# class with unicodedata over every code point):
_FORBIDDEN_CATEGORIES = frozenset({"Cc", "Zl", "Zp", "Cs"})
_FORBIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_DISPLAY_SPECIALS = re.compile(r'[()<>\[\]:;@\\,."]')
_PARSED_CACHE = 4096  # address strings remembered (the sender above all); failures never are
_PARSED_CACHE_CHARS = 512  # longer ones are not (a long display name is not worth the memory)
_DOMAIN_CACHE = 1024  # domains remembered by the fast path (valid or not, at most 253 characters)
# The fast path's local parts: an RFC 5322 dot-atom of ASCII atext (the same
# characters as email_validator's DOT_ATOM_TEXT; explicit ranges, no \w, so
# nothing outside ASCII can match), at most 64 characters (RFC 5321).
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_FAST_LOCAL_PART = re.compile(rf"{_ATEXT}(?:\.{_ATEXT})*")
_FAST_LOCAL_PART_MAX = 64
_ROLE_NAMES = frozenset(CASE_INSENSITIVE_MAILBOX_NAMES)  # RFC 2142: email_validator lower-cases them
_UNQUOTED_NAME_SPECIALS = frozenset('<>@,;:"\\')
_UNQUOTED_NAME_SPECIAL = re.compile(f"[{re.escape(''.join(sorted(_UNQUOTED_NAME_SPECIALS)))}]")
_ENCODED_WORD_BYTES = 36  # -> 48 base64 chars, 60 with the =?utf-8?b?...?= frame
# A display name gets the longest word RFC 2047 allows (45 bytes -> 72 chars):
# Python's parser keeps the space between adjacent words in a phrase (other
# readers drop it, as the RFC says), so names are split only when they must be.
_PHRASE_WORD_BYTES = 45
_MAX_QUOTED_NAME = 60


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    """What the parser accepts beyond email-validator's defaults (the settings build it: ``address_policy()``)."""

    allow_special_use_domains: bool = False  # OUTBOX_MAILER_ALLOW_SPECIAL_USE_DOMAINS; never .invalid


DEFAULT_POLICY = AddressPolicy()
SPECIAL_USE_ALLOWED = AddressPolicy(allow_special_use_domains=True)

# email-validator's list of refused special-use names, read (never written): those an allowing policy lets
# through (arpa, local, localhost, onion, test); ``invalid`` stays refused whatever the policy.
_SPECIAL_USE_NAMES = frozenset(email_validator.SPECIAL_USE_DOMAIN_NAMES) - {"invalid"}
_STAND_IN = ".com"  # a top-level name email-validator accepts, put after a special-use domain to check the rest


def find_control_character(text: str) -> str | None:
    """Return the first character of ``text`` that may not reach a header, or None."""
    match = _FORBIDDEN.search(text)
    return None if match is None else match.group()


@quick_init
@dataclass(frozen=True, slots=True)
class ParsedAddress:
    """One validated mailbox, with the forms composition needs rendered once, when it is parsed
    (and remembered with it: the configured sender's are rendered once per process)."""

    display_name: str  # may be empty; free text, not yet encoded
    local_part: str  # ASCII, or UTF-8 (NFC) for an internationalised address (needs SMTPUTF8)
    domain: str  # as written (Unicode for IDN), lower-cased by the validator
    ascii_domain: str  # punycode form
    # ``local@ascii-domain``: the form for the envelope and the headers (non-ASCII only when
    # the local part is)
    addr_spec: str = field(init=False, repr=False, compare=False)
    # ``Name <addr>`` (name quoted when it has specials) or the bare address; Unicode kept as is
    display: str = field(init=False, repr=False, compare=False)
    # the address as header words (:func:`address_words`)
    header_words: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        addr_spec = f"{self.local_part}@{self.ascii_domain}"
        name = self.display_name
        words: tuple[str, ...]
        if not name:
            display, words = addr_spec, (addr_spec,)
        else:
            quoted = _DISPLAY_SPECIALS.search(name) is not None
            display = f"{_quoted(name) if quoted else name} <{addr_spec}>"
            words = (*_phrase_words(name), f"<{addr_spec}>")
        object.__setattr__(self, "addr_spec", addr_spec)
        object.__setattr__(self, "display", display)
        object.__setattr__(self, "header_words", words)


def _quoted(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def mailbox_form(raw: str) -> str:
    """The one form in which two spellings of a mailbox compare (suppressions, the staging
    allow-list): the envelope's addr-spec, as RCPT TO carries it (the local part in Unicode normal
    form C, the domain folded by IDNA and UTS #46 into its lower-case ASCII form, so
    ``zoe@\uff45xample.com``, ``zoe@example\u3002com`` and ``zoe@example.com`` are one mailbox), with
    the ASCII letters of its local part in lower case (providers compare them so; other letters
    compare as written). A ``Name <...>`` gives its address. CompositionError when ``raw`` is not an
    address this daemon would send to under any policy (special-use domains are compared, ``.invalid``
    refused): whether it may be sent to is composition's question, under the configured policy."""
    parsed = parse_address(raw, "address", SPECIAL_USE_ALLOWED)
    return f"{parsed.local_part.translate(_ASCII_LOWER)}@{parsed.ascii_domain}"


def checked_text(value: object, field: str) -> str:
    """``value`` if it is a string without control characters, else a CompositionError naming ``field``."""
    if not isinstance(value, str):
        raise CompositionError(field, f"expected a string, got {type(value).__name__}")
    bad = find_control_character(value)
    if bad is not None:
        raise CompositionError(field, f"control character {bad!r} is not allowed in {value!r}")
    return value


def parse_address(raw: object, field: str, policy: AddressPolicy = DEFAULT_POLICY) -> ParsedAddress:
    """Parse and validate one address from field ``field`` of a row, under ``policy``."""
    if type(raw) is str and len(raw) <= _PARSED_CACHE_CHARS:
        try:
            return _parsed(raw, policy)
        except CompositionError as exc:  # raised with no field name: give it ours
            raise CompositionError(field, exc.reason) from exc.__cause__
    return _parse_checked(checked_text(raw, field), field, policy)


@lru_cache(maxsize=_PARSED_CACHE)
def _parsed(raw: str, policy: AddressPolicy) -> ParsedAddress:
    """The result does not depend on the field, so it is remembered, by policy (failures are not).

    ``raw`` need not have been checked for control characters: that is done here."""
    return _parse_checked(checked_text(raw, ""), "", policy)


def _parse_checked(raw: str, field: str, policy: AddressPolicy) -> ParsedAddress:
    """parse_address() for a string already checked for control characters."""
    display_name, addr = _split_display_name(raw.strip(), field)
    return _validated(display_name, addr, raw, field, policy)


def parse_address_list(raw: object, field: str, policy: AddressPolicy = DEFAULT_POLICY) -> tuple[ParsedAddress, ...]:
    """Parse a list of addresses under ``policy``; errors name the element as ``field[i]``."""
    if not isinstance(raw, (list, tuple)):
        raise CompositionError(field, f"expected a list of strings, got {type(raw).__name__}")
    try:  # the element's field name is only needed for an error: made then, by the loop below
        return tuple(_parse_unnamed(item, policy) for item in raw)
    except CompositionError:
        pass
    return tuple(parse_address(item, f"{field}[{i}]", policy) for i, item in enumerate(raw))


def _parse_unnamed(raw: object, policy: AddressPolicy) -> ParsedAddress:
    """parse_address() for a field named later (only an error needs its name)."""
    if type(raw) is str and len(raw) <= _PARSED_CACHE_CHARS:
        return _parsed(raw, policy)
    return _parse_checked(checked_text(raw, ""), "", policy)


def _split_display_name(text: str, field: str) -> tuple[str, str]:
    """Split ``Name <addr>`` into (name, addr); a bare addr-spec has no name."""
    if not text.endswith(">"):
        if "<" in text or ">" in text:
            raise CompositionError(field, f"unbalanced angle brackets in {text!r}")
        return "", text
    open_at = text.rfind("<")
    if open_at == -1:
        raise CompositionError(field, f"unbalanced angle brackets in {text!r}")
    addr = text[open_at + 1 : -1].strip()
    return _display_name(text[:open_at].strip(), field), addr


def _display_name(text: str, field: str) -> str:
    """The display name as text: unquoted, escapes resolved, outer spaces dropped."""
    if len(text) >= 2 and text.startswith('"') and text.endswith('"'):
        return _unquote(text[1:-1], field).strip()
    if _UNQUOTED_NAME_SPECIAL.search(text) is None:
        return text
    specials = sorted(_UNQUOTED_NAME_SPECIALS.intersection(text))
    if specials:
        raise CompositionError(
            field,
            f"display name {text!r} contains {''.join(specials)!r}; put it in double quotes",
        )
    return text


def _unquote(inner: str, field: str) -> str:
    chars: list[str] = []
    escaped = False
    for char in inner:
        if escaped:
            chars.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            raise CompositionError(field, f"unescaped double quote in display name {inner!r}")
        else:
            chars.append(char)
    if escaped:
        raise CompositionError(field, f"display name {inner!r} ends with a lone backslash")
    return "".join(chars)


def _validated(display_name: str, addr: str, raw: str, field: str, policy: AddressPolicy) -> ParsedAddress:
    try:
        local_part, domain, ascii_domain = _validate_email(addr, policy)
    except EmailNotValidError as exc:
        raise CompositionError(field, f"invalid address {raw!r}: {exc}") from exc
    return ParsedAddress(
        display_name=display_name,
        local_part=local_part,
        domain=domain,
        ascii_domain=ascii_domain,
    )


def _validate_email(addr: str, policy: AddressPolicy = DEFAULT_POLICY) -> tuple[str, str, str]:
    """(local part, domain, ASCII domain), or EmailNotValidError.

    The fast path (~1 µs) answers for the common addresses, the full
    email_validator check (~20 µs, far more for IDN) for everything else,
    including every refusal.
    """
    fast = _validate_fast(addr, policy)
    return fast if fast is not None else _validate_full(addr, policy)


def _validate_full(addr: str, policy: AddressPolicy = DEFAULT_POLICY) -> tuple[str, str, str]:
    """email_validator without DNS, under ``policy``: the reference the fast path must agree with."""
    result = _validated_email(addr, policy)
    return result.local_part, result.domain, result.ascii_domain


def _validated_email(addr: str, policy: AddressPolicy) -> ValidatedEmail:
    """``validate_email`` without DNS; when ``policy`` allows special-use domains and it refuses ``addr``,
    ``addr`` with :data:`_STAND_IN` after its domain, if that passes and the domain's own top-level name
    is special-use (a dotless or numeric domain stays refused), with the domain's own forms."""
    try:
        return validate_email(addr, check_deliverability=False)
    except EmailNotValidError:
        if not policy.allow_special_use_domains:
            raise
        try:
            stood_in = validate_email(addr + _STAND_IN, check_deliverability=False)
        except EmailNotValidError:
            pass
        else:
            domain, ascii_domain = stood_in.domain[: -len(_STAND_IN)], stood_in.ascii_domain[: -len(_STAND_IN)]
            if "." in ascii_domain and ascii_domain.rpartition(".")[2] in _SPECIAL_USE_NAMES:
                stood_in.domain, stood_in.ascii_domain = domain, ascii_domain
                return stood_in
        raise


def _validate_fast(addr: str, policy: AddressPolicy = DEFAULT_POLICY) -> tuple[str, str, str] | None:
    """What :func:`_validate_full` returns for ``addr``, or None when unsure (never an error).

    Why this is the same answer, for email_validator's default options without
    DNS (the property test tests/unit/test_address_fast_path.py checks it
    against the installed version):

    * A local part matching ``_FAST_LOCAL_PART`` has no ``@ < " \\``, so
      email_validator splits the address at its first ``@`` too; it accepts
      such a local part as is (ASCII is unchanged by NFC) except that it
      lower-cases the RFC 2142 role names, as done here.
    * The domain is then checked on its own, whatever the local part:
      ``_checked_domain`` checks it once behind a representative local part.
    * The only check that involves both parts is the total length (of the
      address as given, normalised and in ASCII), repeated here with the
      real local part.

    Anything else, a refusal above all, returns None: the full check then
    runs and gives the exact error message.
    """
    local, at, domain = addr.partition("@")
    if not at or len(local) > _FAST_LOCAL_PART_MAX or not _FAST_LOCAL_PART.fullmatch(local):
        return None
    if len(domain) > DOMAIN_MAX_LENGTH:  # refused anyway; and not worth a place in the cache
        return None
    checked = _checked_domain(domain, policy)
    if checked is None:
        return None
    unicode_domain, ascii_domain, longest_domain = checked
    if len(local) + 1 + longest_domain > EMAIL_MAX_LENGTH:  # local is ASCII: characters are bytes
        return None
    lower = local.lower()
    return (lower if lower in _ROLE_NAMES else local), unicode_domain, ascii_domain


@lru_cache(maxsize=_DOMAIN_CACHE)
def _checked_domain(domain: str, policy: AddressPolicy) -> tuple[str, str, int] | None:
    """(domain, ASCII domain, longest UTF-8 form in bytes) as email_validator gives them, or None.

    None when the domain is refused, or when the representative address is
    (its length check included): the caller then falls back to the full check.
    """
    try:
        result = _validated_email("x@" + domain, policy)
    except EmailNotValidError:
        return None
    # validate_email_length measures the domain as given, normalised and in ASCII, in UTF-8.
    longest = max(len(domain.encode("utf-8")), len(result.domain.encode("utf-8")), len(result.ascii_domain))
    return result.domain, result.ascii_domain, longest


def address_words(address: ParsedAddress) -> list[str]:
    """The address as header words, to be joined by spaces (and folded between them): the name
    as one quoted string or as encoded words, then ``<addr-spec>``; the bare addr-spec alone."""
    return list(address.header_words)


def _phrase_words(name: str) -> list[str]:
    if name.isascii() and "=?" not in name and len(name) <= _MAX_QUOTED_NAME:
        return [_quoted(name)]
    return encoded_words(name, _PHRASE_WORD_BYTES)


def encoded_words(text: str, chunk_bytes: int = _ENCODED_WORD_BYTES) -> list[str]:
    """RFC 2047 ``=?utf-8?b?...?=`` words; decoders join adjacent ones exactly.

    Each word holds as many whole characters as fit in ``chunk_bytes`` bytes of UTF-8.
    """
    if chunk_bytes < 4:  # a character takes up to 4 bytes: a smaller chunk could hold nothing
        raise ValueError(f"chunk_bytes must be at least 4, not {chunk_bytes}")
    data = text.encode("utf-8")
    chunks: list[bytes] = []
    start = 0
    while len(data) - start > chunk_bytes:
        end = start + chunk_bytes
        while data[end] & 0xC0 == 0x80:  # a UTF-8 continuation byte: end is inside a character
            end -= 1
        chunks.append(data[start:end])
        start = end
    chunks.append(data[start:])
    return [f"=?utf-8?b?{binascii.b2a_base64(c, newline=False).decode('ascii')}?=" for c in chunks]
