"""Header fields of a composed message: a row's own headers checked, every header line rendered.

Pure functions used by :func:`outbox_mailer.message.compose.compose`. A row's own
headers may not be one of those outbox-mailer writes (From, To, Message-ID,
``Content-*`` ...); their values are written as plain ASCII folded at spaces,
never splitting or encoding an ASCII word (a URL, a token), or as RFC 2047
encoded words when they are not ASCII. An ASCII word that cannot fit on one
``Name: word`` line of 998 octets is refused, since no correct way to send it
exists. The RFC 2369 ``List-*`` URL lists fold only between their ``<url>``
items, whose URLs are never encoded.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..errors import CompositionError
from . import mime
from .addresses import (
    ParsedAddress,
    checked_text,
    encoded_words,
)

__all__ = ["FIELD_NAME", "address_header", "checked_custom_headers", "unstructured"]

_RESERVED_HEADERS = frozenset(
    {
        "from", "to", "cc", "bcc", "reply-to", "sender", "subject", "message-id",
        "date", "mime-version", "return-path", "received",
    }
)
# Content-* would alter the MIME structure; Resent-* (Resent-Bcc above all)
# are trace fields that only a re-sending agent may write.
_RESERVED_PREFIXES = ("content-", "resent-")
FIELD_NAME = re.compile(r"[\x21-\x39\x3b-\x7e]{1,76}")  # RFC 5322 ftext, folded-line sized
_LONGEST_LINE = 998  # RFC 5322: a word must fit on "Name: word" within it, folding cannot split one
# RFC 2369's fields: angle-bracketed URLs, comma-separated, whitespace between them meaningless.
# Such a value is written as its URLs, "<url>, <url>", so it can fold between them.
_URL_LIST_FIELDS = frozenset(
    {"list-help", "list-unsubscribe", "list-subscribe", "list-post", "list-owner", "list-archive"}
)
# (Control characters never get this far; other non-ASCII is refused in a URL.)
_URL_LIST = re.compile(r" *<[^<> ]+>(?: *, *<[^<> ]+>)* *")  # no comments: those make it text
_BRACKETED_URL = re.compile(r"<[^<> ]+>")
# What a reader may take for an RFC 2047 encoded word even inside a URL (Python's does):
_ENCODED_WORD_LIKE = re.compile(r"=\?[^<>]*\?[^<>]*\?[^<>]*\?=")


def checked_custom_headers(headers: object) -> list[tuple[str, str]]:
    if not isinstance(headers, dict):
        raise CompositionError("headers", f"expected an object, got {type(headers).__name__}")
    checked = []
    for name, value in headers.items():
        _check_header_name(name)
        value = checked_text(value, f"headers.{name}")
        _check_header_words(name, value)
        checked.append((name, value))
    return checked


def _check_header_words(name: str, value: str) -> None:
    """Refuse a value that could only be sent broken.

    ASCII words are written as they are (:func:`unstructured`), and folding may not
    split one (RFC 5322 2.2.3), so each must fit on ``Name: word`` within 998 octets;
    as RFC 2047 encoded words a URL or token would no longer be one.  The URLs of an
    RFC 2369 URL list (List-Unsubscribe ...) are never encoded, so they must be ASCII
    and free of ``=?...?=``, which a reader may decode.  Other non-ASCII values are
    text, sent as encoded words whatever their length.
    """
    if value.isascii() and "=?" not in value and len(name) + 2 + len(value) <= _LONGEST_LINE:
        return  # the common case: every word fits, and no URL can need refusing
    field = f"headers.{name}"
    words = _url_list_words(name, value)
    if words is not None:
        for url in (word.rstrip(",") for word in words):
            if not url.isascii():
                raise CompositionError(
                    field, f"URL {_excerpt(url)} is not ASCII: percent-encode it (a domain as punycode); "
                    "as RFC 2047 encoded words it would be no URL",
                )
            if _ENCODED_WORD_LIKE.search(url):
                raise CompositionError(
                    field, f"URL {_excerpt(url)} holds '=?...?=', which readers may decode as an "
                    "RFC 2047 encoded word: percent-encode its '?' as %3F",
                )
    elif value.isascii():
        words = value.split(" ")
    else:
        return
    longest = max(words, key=len)
    if len(name) + 2 + len(longest) > _LONGEST_LINE:
        raise CompositionError(
            field, f"the word {_excerpt(longest)} ({len(longest)} characters) does not fit on one line: "
            f"'{name}: ' and a word may take at most {_LONGEST_LINE} octets (RFC 5322), "
            f"so at most {_LONGEST_LINE - len(name) - 2} here, and folding may not split a word",
        )


def _url_list_words(name: str, value: str) -> list[str] | None:
    """The words of an RFC 2369 URL list (``<url>,`` ... ``<url>``), or None if ``value`` is not one."""
    if name.lower() not in _URL_LIST_FIELDS or _URL_LIST.fullmatch(value) is None:
        return None
    urls = _BRACKETED_URL.findall(value)
    return [f"{url}," for url in urls[:-1]] + [urls[-1]]


def _excerpt(word: str) -> str:
    return repr(word) if len(word) <= 40 else repr(word[:40]) + "..."


def _check_header_name(name: object) -> None:
    if not isinstance(name, str) or not FIELD_NAME.fullmatch(name):
        raise CompositionError(
            "headers",
            f"invalid header name {name!r}: 1-76 printable ASCII characters, no colon or space",
        )
    lower = name.lower()
    if lower in _RESERVED_HEADERS or lower.startswith(_RESERVED_PREFIXES):
        raise CompositionError(f"headers.{name}", f"{name} is set by outbox-mailer; it cannot be given")


def unstructured(name: str, value: str) -> str:
    """``Name: value`` folded at spaces; encoded words when the value is not plain ASCII.

    ASCII words are never split or encoded when they fit on ``Name: word`` (a custom
    header's longer ones were refused by :func:`_check_header_words`; a Subject's are
    encoded).  An RFC 2369 URL list is written as ``<url>, <url>``, folded between URLs.
    """
    longest_word = _LONGEST_LINE - len(name) - 2
    if value.startswith(("<", " ")) and name.lower() in _URL_LIST_FIELDS:
        urls = _url_list_words(name, value)
        if (  # as checked by _check_header_words(); else it is text, as below
            urls is not None and value.isascii() and not _ENCODED_WORD_LIKE.search(value)
            and max(map(len, urls)) <= longest_word
        ):
            return mime.fold_header(name, urls)
    if value.isascii() and "=?" not in value and not value.startswith(" "):
        if len(name) + 2 + len(value) <= mime.MAX_HEADER_LINE:  # one line: what fold_header() returns
            return f"{name}: {value}\r\n"
        words = value.split(" ")
        if max(map(len, words)) <= longest_word:
            folded = mime.fold_header(name, words)
            # Runs of spaces never become fold points: fall back if they make a line too long.
            if len(folded) <= _LONGEST_LINE or max(map(len, folded.split("\r\n"))) <= _LONGEST_LINE:
                return folded
    # Encoded words also keep leading spaces, which a reader drops from a plain value.
    return mime.fold_header(name, encoded_words(value))


def address_header(name: str, addresses: Sequence[ParsedAddress]) -> str:
    """``Name: addr, addr``, folded between words; the words were rendered when each address was parsed."""
    if len(addresses) == 1:
        return mime.fold_header(name, addresses[0].header_words)
    words: list[str] = []
    for address in addresses[:-1]:
        *rest, last = address.header_words
        words += rest
        words.append(last + ",")
    words += addresses[-1].header_words
    return mime.fold_header(name, words)
