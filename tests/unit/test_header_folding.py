"""Long words in the row's own headers: written as they are, or refused; never turned into
encoded words when they are ASCII (an RFC 2047 encoded URL is no longer a URL).

RFC 5322 2.1.1 / 2.2.3: a line is at most 998 octets and folding happens only at
whitespace, so a word must fit on ``Name: word`` within 998 octets.
"""

from __future__ import annotations

import email.policy
import re
from email.parser import BytesParser
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from outbox_mailer.delivery import ComposedMessage
from outbox_mailer.errors import CompositionError
from tests.unit.test_compose import run

LINE = 998


def longest_word(name: str) -> int:
    """The longest word that fits on ``Name: word`` in one 998-octet line."""
    return LINE - len(name) - len(": ")


def url_of(size: int, prefix: str = "https://example.com/unsub?token=") -> str:
    """``<prefix...>`` of exactly ``size`` characters, brackets included."""
    return f"<{prefix}{'a1B2' * (size // 4 + 1)}"[: size - 1] + ">"


def compose_headers(headers: dict[str, Any]) -> ComposedMessage:
    return run(headers=headers)


def header_lines(composed: ComposedMessage, name: str) -> list[bytes]:
    """The physical lines of header ``name`` (its first line and continuation lines)."""
    lines = composed.data.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
    start = next(i for i, line in enumerate(lines) if line.lower().startswith(name.lower().encode() + b":"))
    end = start + 1
    while end < len(lines) and lines[end][:1] == b" ":
        end += 1
    return lines[start:end]


def parsed_header(composed: ComposedMessage, name: str) -> str:
    parsed = BytesParser(policy=email.policy.default).parsebytes(composed.data)
    assert not parsed.defects
    value = parsed[name]
    assert not value.defects, value.defects
    return str(value)


def assert_lines_fit(composed: ComposedMessage) -> None:
    assert max(len(line) for line in composed.data.split(b"\r\n")) <= LINE


@pytest.mark.parametrize("size", [901, 960, longest_word("List-Unsubscribe")])
def test_long_list_unsubscribe_url_is_written_unencoded_on_one_line(size: int) -> None:
    url = url_of(size)
    composed = compose_headers({"List-Unsubscribe": url})
    lines = header_lines(composed, "List-Unsubscribe")
    assert lines == [b"List-Unsubscribe: " + url.encode("ascii")]  # intact, not encoded
    assert b"=?" not in b"".join(lines)
    assert len(lines[0]) <= LINE
    assert_lines_fit(composed)
    assert parsed_header(composed, "List-Unsubscribe") == url


def test_two_list_unsubscribe_urls_fold_between_them() -> None:
    https = url_of(940)
    mailto = "<mailto:unsubscribe@example.com?subject=unsubscribe>"
    value = f"{https}, {mailto}"
    composed = compose_headers({"List-Unsubscribe": value, "List-Unsubscribe-Post": "List-Unsubscribe=One-Click"})
    assert header_lines(composed, "List-Unsubscribe") == [
        f"List-Unsubscribe: {https},".encode("ascii"),
        f" {mailto}".encode("ascii"),
    ]
    assert_lines_fit(composed)
    assert parsed_header(composed, "List-Unsubscribe") == value
    assert parsed_header(composed, "List-Unsubscribe-Post") == "List-Unsubscribe=One-Click"


def test_list_unsubscribe_urls_written_without_a_space_still_fold_at_the_comma() -> None:
    https = url_of(70)
    mailto = "<mailto:unsubscribe@example.com?subject=unsubscribe,now>"  # a comma inside a URL is no fold point
    composed = compose_headers({"List-Unsubscribe": f"  {https},{mailto} "})
    assert header_lines(composed, "List-Unsubscribe") == [
        f"List-Unsubscribe: {https},".encode("ascii"),
        f" {mailto}".encode("ascii"),
    ]
    # RFC 2369: whitespace between the bracketed URLs means nothing; the URLs are kept exactly.
    assert parsed_header(composed, "List-Unsubscribe") == f"{https}, {mailto}"


def test_list_unsubscribe_url_with_a_question_mark_after_an_equals_sign_is_not_encoded() -> None:
    url = "<https://example.com/unsub?list=news&confirm=?yes>"
    composed = compose_headers({"List-Unsubscribe": url})
    assert header_lines(composed, "List-Unsubscribe") == [f"List-Unsubscribe: {url}".encode("ascii")]
    assert parsed_header(composed, "List-Unsubscribe") == url


@pytest.mark.parametrize(("name", "value"), [
    ("List-Unsubscribe", url_of(1_100)),
    ("List-Unsubscribe", f"<mailto:u@example.com>, {url_of(1_100)}"),
    ("X-Token", "t" * 1_100),
    ("X-Token", "a b " + "t" * 1_100 + " c"),
    ("X-Token", "=?" + "t" * 1_100),  # ASCII: refused like any other, not encoded
])
def test_word_too_long_for_any_line_is_refused_naming_the_header(name: str, value: str) -> None:
    with pytest.raises(CompositionError) as info:
        compose_headers({name: value})
    assert info.value.field == f"headers.{name}"
    assert "998" in info.value.reason


@pytest.mark.parametrize("name", ["X-Token", "List-Unsubscribe", "X-" + "L" * 74])
def test_word_limit_is_what_fits_after_the_name(name: str) -> None:
    fits = "t" * longest_word(name)
    composed = compose_headers({name: f"short {fits} words"})
    assert header_lines(composed, name) == [
        f"{name}: short".encode("ascii"), f" {fits}".encode("ascii"), b" words",
    ]
    assert parsed_header(composed, name) == f"short {fits} words"
    assert_lines_fit(composed)
    with pytest.raises(CompositionError) as info:
        compose_headers({name: f"short {fits}t words"})
    assert info.value.field == f"headers.{name}"


@pytest.mark.parametrize("url", [
    "<https://bücher.example/unsub>",
    "<https://example.com/unsub?name=Jürgen>",
    "<mailto:u@example.com>, <https://example.com/désabonner>",
])
def test_list_unsubscribe_url_that_is_not_ascii_is_refused(url: str) -> None:
    with pytest.raises(CompositionError) as info:
        compose_headers({"List-Unsubscribe": url})
    assert info.value.field == "headers.List-Unsubscribe"
    assert "ASCII" in info.value.reason


def test_list_unsubscribe_url_holding_an_encoded_word_is_refused() -> None:
    # Written as is, a reader may decode it (Python's does, CR/LF included); encoded, it is no URL.
    url = "<https://example.com/u?x==?utf-8?q?hi=0D=0ABcc:_spy@example.org?=>"
    with pytest.raises(CompositionError) as info:
        compose_headers({"List-Unsubscribe": url})
    assert info.value.field == "headers.List-Unsubscribe"


@pytest.mark.parametrize("value", [
    "Frühling " + "x" * 1_100,
    "é" * 700,
    "Désabonner <https://example.com/" + "u" * 1_000 + ">",  # not a URL list: unstructured text
])
def test_non_ascii_long_value_is_still_encoded_and_round_trips(value: str) -> None:
    for name in ("X-Campaign", "List-Unsubscribe"):
        composed = compose_headers({name: value})
        lines = header_lines(composed, name)
        assert all(b"=?utf-8?b?" in line for line in lines)
        assert_lines_fit(composed)
        assert parsed_header(composed, name) == value


_WORD = st.one_of(
    st.integers(1, 1_100).map(lambda n: "w" * n),
    st.text("abc<>,:;=?@/", min_size=1, max_size=30),
    st.sampled_from(["", "é", url_of(400), url_of(950)]),
)


URL_LIST = re.compile(r" *<[^<> ]+>(?: *, *<[^<> ]+>)* *")  # RFC 2369, without comments
BRACKETED = re.compile(r"<[^<> ]+>")


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(["X-Note", "List-Unsubscribe", "List-Help", "X-" + "L" * 74]),
    words=st.lists(_WORD, min_size=1, max_size=5),
    separator=st.sampled_from([" ", ", ", ","]),
)
def test_every_line_fits_and_ascii_words_are_never_encoded(name: str, words: list[str], separator: str) -> None:
    value = separator.join(words)
    url_list = name.startswith("List-") and URL_LIST.fullmatch(value) is not None
    try:
        composed = compose_headers({name: value})
    except CompositionError as exc:
        event("refused")
        assert exc.field == f"headers.{name}"
        if url_list:  # a URL list: refused for a long, non-ASCII or encoded-word-like URL
            assert any(len(url) + 1 > longest_word(name) or not url.isascii() or "=?" in url
                       for url in BRACKETED.findall(value)), exc.reason
        else:  # otherwise only for an ASCII word too long for a line
            assert value.isascii() and max(map(len, value.split(" "))) > longest_word(name), exc.reason
        return
    event(f"composed{' URL list' if url_list else ''}")
    assert_lines_fit(composed)
    assert composed.data.isascii()
    parsed = parsed_header(composed, name)
    written = b"".join(header_lines(composed, name))
    if url_list:
        assert b"=?utf-8?b?" not in written  # never our encoded words
        assert parsed == ", ".join(BRACKETED.findall(value))
    elif value.isascii() and "=?" not in value and not value.startswith(" "):
        assert b"=?" not in written  # written as is
        assert parsed == value
    else:
        assert parsed == value
