"""compose() against the standard library as the oracle (property-based).

compose() assembles MIME directly (outbox_mailer.message.mime) and no longer parses each
message back.  This file is the proof that it may: for any generated row,

* the row is valid here exactly when compose() accepts it (the rules are
  restated independently below, with unicodedata); invalid rows raise
  CompositionError;
* a valid row's bytes are 7-bit ASCII with CRLF line endings, lines of at most
  998 octets, identical on a second composition, and pass check_composed();
* parsed with BytesParser(policy=email.policy.default) they have no defects and
  exactly the header names of a reference EmailMessage built from the same row
  (no input can add a header), the same MIME tree (content types and part
  header names), the same header values (Date, Message-ID, decoded Subject and
  custom headers), the same addresses (display names and addr-specs), the same
  text/html content after the parser's decoding, and the same attachments
  (filename, content type, disposition, exact bytes).

Where the reference cannot serve, the row's literal value is the expectation:
EmailMessage decodes ``=?...?=`` fragments found in a header value it is given
(the door CVE-2024-6923 came through), whereas compose() sends every value as
literal text.  Display names sent as RFC 2047 encoded words (non-ASCII, long,
or containing ``=?``) meet two limits of Python's reader, not of the bytes: it
turns a run of spaces inside an encoded word into one space, and it keeps the
space between adjacent encoded words (RFC 2047 readers drop it).  Such names
are compared with runs of spaces squeezed (one encoded word) or without
whitespace (several); names sent as quoted strings are compared exactly.

The example count is OUTBOX_ORACLE_EXAMPLES (default 300; run it once with
5000 or more after changing compose.py or mime.py).
"""

from __future__ import annotations

import base64
import os
import re
import sys
import unicodedata
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.headerregistry import Address
from email.message import EmailMessage
from email.parser import BytesParser
from email.policy import default as default_policy
from email.utils import format_datetime
from typing import Any

import pytest
from email_validator.rfc_constants import CASE_INSENSITIVE_MAILBOX_NAMES
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from outbox_mailer.delivery import Delivery
from outbox_mailer.errors import CompositionError
from outbox_mailer.message import addresses as addresses_module
from outbox_mailer.message.compose import check_composed, compose

NOW = datetime(2026, 5, 1, 12, 30, tzinfo=UTC)
MESSAGE_ID = "<0662a1b2c3d4e5f6a7b8c9d0e1f2a3b4@oracle.example>"  # as a claim writes it
EXAMPLES = int(os.environ.get("OUTBOX_ORACLE_EXAMPLES", "300"))
FORBIDDEN_CATEGORIES = {"Cc", "Zl", "Zp", "Cs"}

# -- strategies ----------------------------------------------------------------

DOMAINS = [  # (as written in the row, as it must appear on the wire)
    ("example.com", "example.com"),
    ("Example.COM", "example.com"),
    ("mail.example.org", "mail.example.org"),
    ("bücher.example.com", "xn--bcher-kva.example.com"),
    ("Müller.example.org", "xn--mller-kva.example.org"),
    ("例え.example.com", "xn--r8jz45g.example.com"),
]
FRAGMENTS = [  # header-safe, but tricky
    " ", "  ", "=?", "?=", "=?utf-8?q?", "=?utf-8?b?", "=?utf-8?q?hi=0D=0ABcc:_x@example.org?=",
    "=?iso-8859-1?q?=E9?=", "=?utf-8?b?IHg=?= =?utf-8?b?eQ==?=", "=0D=0A", "=", ":", ";", ",", "<", ">", '"',
    "\\", "(", ")", "Bcc: spy@example.org", "Content-Type: text/html", "--", "--=_mixed_", "ü", "東京", "🎉",
    "\u00a0", "\u3000", "\u200d", "x" * 100, "y" * 1000, " " * 120, "z" + " " * 1000, "é" * 80,
]
BAD_FRAGMENTS = ["\r\n", "\n", "\r", "\t", "\r\nBcc: spy@example.org", "\x00", "\x1b", "\x85", "\u2028",
                 "\u2029", "\ud800"]
BODY_FRAGMENTS = [
    *FRAGMENTS, *BAD_FRAGMENTS[:-1], "\n.\n", "\n..\n", ".", "\nFrom here\n", "From ", "trailing   \n",
    "tab\t\n", "\r\r\n", "\n\r", "\x0b", "\x0c", "\x7f", "\U0010ffff", "=20", "=\n", "z" * 77 + "\n",
    "w" * 79, "v" * 2000, "\n" * 5,
]
SAFE_CHARS = st.characters(blacklist_categories=("Cc", "Zl", "Zp", "Cs"))
HEADER_NAMES = ["X-Note", "List-Unsubscribe", "List-Unsubscribe-Post", "X-Campaign", "Precedence",
                "Auto-Submitted", "X-Entity-Ref-ID", "X-" + "L" * 74]
BAD_HEADER_NAMES = ["Bcc", "Content-Type", "X Foo", "Subject", "Resent-To"]
CONTENT_TYPES = ["application/pdf", "application/octet-stream", "text/plain", "text/html", "image/png",
                 "Text/CSV", "application/vnd.ms-excel", "audio/x-wav"]


@st.composite
def texts(draw: st.DrawFn, fragments: list[str] = FRAGMENTS, *, bad_odds: int = 15) -> str:
    """Arbitrary Unicode and tricky fragments; one draw in ``bad_odds`` may hold anything at all."""
    if draw(st.integers(0, 10_000)) % bad_odds == 7:  # not 0: Hypothesis favours the bounds
        pieces = st.one_of(st.sampled_from(BAD_FRAGMENTS), st.text(max_size=10), st.sampled_from(fragments))
        return "".join(draw(st.lists(pieces, min_size=1, max_size=6)))
    pieces = st.one_of(st.sampled_from(fragments), st.text(alphabet=SAFE_CHARS, max_size=30))
    return draw(st.one_of(st.text(alphabet=SAFE_CHARS, max_size=40), st.lists(pieces, max_size=8).map("".join)))


TEXT = texts()
BODY = st.one_of(texts(BODY_FRAGMENTS, bad_odds=60), st.text(max_size=100))
FILENAME = st.one_of(
    texts([f for f in FRAGMENTS if "=?" not in f and len(f) < 200], bad_odds=30).map(lambda f: f or "f"),
    st.text(alphabet="abc.é東 _-\\\"';%", min_size=1, max_size=300),
)
DATA = st.one_of(st.binary(max_size=200), st.tuples(st.binary(min_size=1, max_size=60), st.integers(1, 60)).map(
    lambda t: t[0] * t[1]))
LOCAL = st.from_regex(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]{1,12}(\.[A-Za-z0-9_+-]{1,6}){0,2}", fullmatch=True)


@dataclass(frozen=True)
class Mailbox:
    name: str  # display name as the row means it (before outer spaces are dropped)
    local: str
    domain: str  # as written in the row
    ascii_domain: str
    quoted: bool

    @property
    def row(self) -> str:
        addr = f"{self.local}@{self.domain}"
        if not self.name:
            return addr
        if self.quoted:
            return '"' + self.name.replace("\\", "\\\\").replace('"', '\\"') + f'" <{addr}>'
        return f"{self.name} <{addr}>"

    @property
    def addr_spec(self) -> str:
        local = self.local.lower() if self.local.lower() in CASE_INSENSITIVE_MAILBOX_NAMES else self.local
        return f"{local}@{self.ascii_domain}"


@st.composite
def mailboxes(draw: st.DrawFn) -> Mailbox:
    name = draw(st.one_of(st.just(""), texts(bad_odds=60), st.text(alphabet="abcdeÄö東 ", max_size=70)))
    domain, ascii_domain = draw(st.sampled_from(DOMAINS))
    # Unquoted only when the name cannot be mistaken for anything else.
    quoted = bool(re.search(r'[<>@,;:"\\]', name)) or name.strip() != name or draw(st.booleans())
    return Mailbox(name, draw(LOCAL), domain, ascii_domain, quoted)


@dataclass(frozen=True)
class Attachment:
    filename: str
    content_type: str
    data: bytes

    @property
    def row(self) -> dict[str, str]:
        return {"filename": self.filename, "content_type": self.content_type,
                "content_base64": base64.b64encode(self.data).decode("ascii")}


@dataclass(frozen=True)
class Row:
    sender: Mailbox
    to: list[Mailbox]
    cc: list[Mailbox]
    bcc: list[Mailbox]
    reply_to: Mailbox | None
    subject: str
    text: str | None
    html: str | None
    headers: dict[str, str]
    attachments: list[Attachment] = field(default_factory=list)

    def delivery(self) -> Delivery:
        return Delivery(
            id=1, dedupe_key="oracle-key", claim_token=uuid.UUID(int=1), attempts=1, max_attempts=None,
            from_address=self.sender.row, to_addresses=tuple(m.row for m in self.to),
            cc_addresses=tuple(m.row for m in self.cc), bcc_addresses=tuple(m.row for m in self.bcc),
            reply_to=None if self.reply_to is None else self.reply_to.row, subject=self.subject,
            text_body=self.text, html_body=self.html, headers=dict(self.headers),
            attachments=[a.row for a in self.attachments], metadata={}, transport=None, priority=0,
            scheduled_at=NOW, expires_at=None, created_at=NOW, message_id=MESSAGE_ID,
        )


@st.composite
def rows(draw: st.DrawFn) -> Row:
    names = draw(st.lists(st.sampled_from(HEADER_NAMES), max_size=3, unique=True))
    if draw(st.integers(0, 60)) == 0:
        names.append(draw(st.sampled_from(BAD_HEADER_NAMES)))
    bodies = draw(st.sampled_from(["text", "html", "both", "both"] if draw(st.integers(0, 60)) else ["none"]))
    attachments = draw(st.lists(st.builds(
        Attachment,
        filename=FILENAME,
        content_type=st.sampled_from(CONTENT_TYPES),
        data=DATA,
    ), max_size=3))
    return Row(
        sender=draw(mailboxes()),
        to=draw(st.lists(mailboxes(), min_size=1, max_size=3)),
        cc=draw(st.lists(mailboxes(), max_size=2)),
        bcc=draw(st.lists(mailboxes(), max_size=2)),
        reply_to=draw(st.one_of(st.none(), mailboxes())),
        subject=draw(TEXT),
        text=draw(BODY) if bodies in ("text", "both") else None,
        html=draw(BODY) if bodies in ("html", "both") else None,
        headers={name: draw(TEXT) for name in names},
        attachments=attachments,
    )


# -- the rules, restated independently -----------------------------------------


def has_forbidden(text: str) -> bool:
    return any(unicodedata.category(c) in FORBIDDEN_CATEGORIES for c in text)


def invalid_because(row: Row) -> str | None:
    """The validity rules of compose() for the fields the strategies vary: why ``row`` is refused."""
    if any(has_forbidden(m.name) for m in (row.sender, *row.to, *row.cc, *row.bcc, row.reply_to) if m):
        return "control character in a display name"
    if has_forbidden(row.subject) or any(has_forbidden(v) for v in row.headers.values()):
        return "control character in a header value"
    if any(n in BAD_HEADER_NAMES for n in row.headers):
        return "reserved or malformed header name"
    for name, value in row.headers.items():
        urls = url_list(name, value)
        if urls is not None and any(not url.isascii() or re.search(r"=\?.*\?.*\?.*\?=", url) for url in urls):
            return "a URL of a List-* header that is not ASCII or holds an encoded word"
        # RFC 5322: "Name: word" fits in 998 octets; folding never splits a word, and an
        # ASCII word is never encoded (a URL or token in encoded words is no longer one).
        words = value.split(" ") if urls is None else [url + "," for url in urls]
        if value.isascii() and len(name) + 2 + max(map(len, words)) > 998:
            return "an ASCII header word too long for a line"
    if row.text is None and row.html is None:
        return "no body"
    if any(unicodedata.category(c) == "Cs" for body in (row.text, row.html) if body for c in body):
        return "lone surrogate in a body"
    for a in row.attachments:
        if not 1 <= len(a.filename) <= 255:
            return "filename length"
        if has_forbidden(a.filename) or "=?" in a.filename:
            return "control character or =? in a filename"
    return None


def url_list(name: str, value: str) -> list[str] | None:
    """The URLs of an RFC 2369 field written as ``<url>, <url>`` (no comments), else None."""
    if name.lower() not in {"list-help", "list-unsubscribe", "list-subscribe", "list-post", "list-owner",
                            "list-archive"}:
        return None
    if not re.fullmatch(r" *<[^<> ]+>(?: *, *<[^<> ]+>)* *", value):
        return None
    return re.findall(r"<[^<> ]+>", value)


# -- the reference --------------------------------------------------------------


def address(mailbox: Mailbox) -> Address:
    local, domain = mailbox.addr_spec.split("@")
    return Address(display_name=mailbox.name.strip(), username=local, domain=domain)


def reference(row: Row, message_id: str) -> EmailMessage:
    ref = EmailMessage(policy=default_policy)
    ref["Date"] = format_datetime(NOW)
    ref["From"] = address(row.sender)
    ref["To"] = [address(m) for m in row.to]
    if row.cc:
        ref["Cc"] = [address(m) for m in row.cc]
    if row.reply_to is not None:
        ref["Reply-To"] = address(row.reply_to)
    ref["Subject"] = row.subject
    ref["Message-ID"] = message_id
    for name, value in row.headers.items():
        ref[name] = value
    if row.text is not None:
        ref.set_content(row.text)
        if row.html is not None:
            ref.add_alternative(row.html, subtype="html")
    else:
        ref.set_content(row.html, subtype="html")
    for a in row.attachments:
        maintype, subtype = a.content_type.lower().split("/")
        ref.add_attachment(a.data, maintype=maintype, subtype=subtype, filename=a.filename)
    return ref


# -- comparing ------------------------------------------------------------------


def tree(part: EmailMessage, *, root: bool = True) -> tuple[Any, ...]:
    names = sorted(n.lower() for n in part)
    if root:
        names = [n for n in names if n.startswith("content-")]
    else:  # EmailMessage leaves a MIME-Version in parts it creates; a reader ignores it there
        names = [n for n in names if n != "mime-version"]
    return (part.get_content_type(), names, tuple(tree(p, root=False) for p in part.iter_parts()))


def leaves(part: EmailMessage) -> list[EmailMessage]:
    return [p for p in part.walk() if not p.is_multipart()]


def body_text(part: EmailMessage) -> str:
    content = part.get_content()
    assert isinstance(content, str)
    return content.replace("\r\n", "\n")


def names_match(parsed: str, expected: str) -> bool:
    """Display names: exact when sent as a quoted string; else as exact as Python's reader allows."""
    if expected.isascii() and "=?" not in expected and len(expected) <= 60:
        return parsed == expected  # a quoted string
    if len(expected.encode("utf-8")) <= 45:  # one encoded word: the reader turns runs of whitespace
        # into one space (a space and a no-break space too: ': \xa00' reads as ': 0')
        return re.sub(r"\s+", " ", parsed) == re.sub(r"\s+", " ", expected)
    # Several encoded words: the reader also adds a space between them.
    return re.sub(r"\s", "", parsed) == re.sub(r"\s", "", expected)


def assert_matches_reference(row: Row, data: bytes, message_id: str) -> None:
    parsed = BytesParser(policy=default_policy).parsebytes(data)
    ref = reference(row, message_id)

    # Header names: exactly the reference's, each once; nothing injected.
    assert sorted(n.lower() for n in parsed) == sorted(n.lower() for n in ref)
    assert "bcc" not in {n.lower() for n in parsed}
    # MIME tree and no defects anywhere.
    assert tree(parsed) == tree(ref)
    for part in parsed.walk():
        assert not part.defects, part.defects
        for name, value in part.items():
            assert not value.defects, (name, value.defects)

    # Header values.
    assert parsed["date"].datetime == NOW
    assert parsed["message-id"] == message_id == ref["message-id"]
    assert parsed["mime-version"] == "1.0"
    for name, value in (("Subject", row.subject), *row.headers.items()):
        urls = url_list(name, value)
        if urls is not None:  # whitespace between the URLs means nothing: written as "<url>, <url>"
            assert parsed[name] == ", ".join(urls)
            continue
        assert parsed[name] == value  # the literal text, encoded words and all
        if "=?" not in value:
            assert str(ref[name]) == value  # and there the reference agrees
    for name, boxes in (("From", [row.sender]), ("To", row.to), ("Cc", row.cc),
                        ("Reply-To", [row.reply_to] if row.reply_to else [])):
        if not boxes:
            continue
        got = [(a.display_name, a.addr_spec) for a in parsed[name].addresses]
        want = [(a.display_name, a.addr_spec) for a in ref[name].addresses]
        assert [g[1] for g in got] == [w[1] for w in want]
        for (got_name, _), (want_name, _) in zip(got, want, strict=True):
            assert names_match(got_name, want_name), (got_name, want_name)
    shown = {m.addr_spec for m in (row.sender, *row.to, *row.cc, *([row.reply_to] if row.reply_to else []))}
    header_block = data.split(b"\r\n\r\n", 1)[0].decode("ascii")
    for box in row.bcc:  # envelope only
        if box.addr_spec not in shown:
            assert not re.search(f"[\\s<,]{re.escape(box.addr_spec)}[\\s>,]", header_block + "\r\n")

    # Bodies and attachments, leaf by leaf, in order.
    got_leaves, want_leaves = leaves(parsed), leaves(ref)
    assert len(got_leaves) == len(want_leaves)
    for got, want in zip(got_leaves, want_leaves, strict=True):
        assert got.get_content_type() == want.get_content_type()
        assert got.get_content_disposition() == want.get_content_disposition()
        if want.get_content_disposition() == "attachment":
            # Through the header registry: Message.get_filename() strips whitespace and
            # quotes that wrap the whole name (both sides alike), so it would hide a difference.
            assert got["content-disposition"].params == want["content-disposition"].params
            assert got.get_payload(decode=True) == want.get_payload(decode=True)
        else:
            assert got.get_content_charset() == "utf-8"
            assert body_text(got) == body_text(want)
    for got, attachment in zip(got_leaves[len(got_leaves) - len(row.attachments):],
                               row.attachments, strict=True):
        assert got["content-disposition"].params["filename"] == attachment.filename  # exactly
        assert got.get_payload(decode=True) == attachment.data


def assert_wire_format(data: bytes) -> None:
    assert data.isascii()
    assert re.search(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]", data) is None  # 7bit: no NUL, no controls
    assert re.search(rb"\r(?!\n)|(?<!\r)\n", data) is None
    assert max(len(line) for line in data.split(b"\r\n")) <= 998


def run(delivery: Delivery) -> Any:
    # the reference has no generated text alternative: tests/unit/test_compose.py covers that part
    return compose(delivery, default_from=None, max_message_bytes=10_000_000, now=NOW, text_alternative=False)


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(row=rows())
def test_compose_matches_the_standard_library(row: Row) -> None:
    delivery = row.delivery()
    reason = invalid_because(row)
    if reason is not None:
        event(f"invalid: {reason}")
        with pytest.raises(CompositionError) as info:
            run(delivery)
        assert info.value.field != "message"
        return
    composed = run(delivery)
    event(f"valid: {'multipart' if row.attachments or (row.text and row.html) else 'single part'}")
    assert composed.message_id == MESSAGE_ID
    assert_wire_format(composed.data)
    assert run(delivery).data == composed.data  # deterministic, boundaries included
    check_composed(composed)
    assert_matches_reference(row, composed.data, composed.message_id)


def test_forbidden_character_class_matches_unicodedata() -> None:
    """find_control_character's regex is exactly the Cc/Zl/Zp/Cs categories."""
    everything = "".join(map(chr, range(sys.maxunicode + 1)))
    by_category = {c for c in everything if unicodedata.category(c) in FORBIDDEN_CATEGORIES}
    assert addresses_module._FORBIDDEN_CATEGORIES == FORBIDDEN_CATEGORIES
    assert set(addresses_module._FORBIDDEN.findall(everything)) == by_category


@pytest.mark.parametrize("body", [
    "", "\n", "\r", "a", "a\r\nb\rc\n", "." , "\n.\n", "From me\n", "x" * 78, "x" * 79, "trailing \t",
    "é", "東京" * 500, "\x00", "--=_alternative_x_0", "=?utf-8?q?a?=", "line\u2028sep", "\x85",
])
def test_body_edge_cases_match_the_standard_library(body: str) -> None:
    mailbox = Mailbox("", "a", "example.com", "example.com", False)
    for text, html in ((body, None), (None, body), (body, body)):
        row = Row(mailbox, [mailbox], [], [], None, "s", text, html, {},
                  [Attachment("f.bin", "application/octet-stream", body.encode("utf-8", "surrogatepass"))])
        composed = run(row.delivery())
        assert_wire_format(composed.data)
        assert_matches_reference(row, composed.data, composed.message_id)


@pytest.mark.parametrize("value", [
    "", " ", "   lead", "trail   ", "a" + " " * 2000 + "b", " " * 2000, "x" * 920, "x" * 901 + " y",
    "=?utf-8?q?hi=0D=0ABcc:_spy@example.org?=", "a =?utf-8?b?IHg=?= b", "ü" * 400,
])
def test_header_edge_cases_match_the_standard_library(value: str) -> None:
    mailbox = Mailbox("", "a", "example.com", "example.com", False)
    row = Row(mailbox, [mailbox], [], [], None, value, "t", None, {"X-" + "L" * 74: value})
    composed = run(row.delivery())
    assert_wire_format(composed.data)
    check_composed(composed)
    assert_matches_reference(row, composed.data, composed.message_id)


def test_header_word_too_long_for_a_line_is_refused() -> None:
    mailbox = Mailbox("", "a", "example.com", "example.com", False)
    name = "X-" + "L" * 74
    row = Row(mailbox, [mailbox], [], [], None, "s", "t", None, {name: "x" * 921})  # 76 + 2 + 921 > 998
    assert invalid_because(row) is not None
    with pytest.raises(CompositionError) as info:
        run(row.delivery())
    assert info.value.field == f"headers.{name}"
