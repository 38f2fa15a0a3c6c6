"""compose(): a row in, exact message bytes out; bad rows refused by field."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import email
import email.policy
import re
import uuid
from datetime import UTC, datetime, timedelta, timezone
from email.message import EmailMessage
from email.parser import BytesParser
from email.utils import format_datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from outbox_mailer.delivery import ComposedMessage, Delivery
from outbox_mailer.errors import CompositionError
from outbox_mailer.message import mime
from outbox_mailer.message.compose import check_composed, compose
from outbox_mailer.message.header_fields import unstructured

NOW = datetime(2026, 5, 1, 12, 30, tzinfo=UTC)
KEY = "order-42-receipt"
MESSAGE_ID = "<0662a1b2c3d4e5f6a7b8c9d0e1f2a3b4@example.com>"  # as a claim writes it (message_ids.py)


def make_delivery(**overrides: Any) -> Delivery:
    fields: dict[str, Any] = dict(
        id=1,
        dedupe_key=KEY,
        claim_token=uuid.UUID(int=1),
        attempts=1,
        max_attempts=None,
        from_address="Shop <shop@example.com>",
        to_addresses=("alice@example.com",),
        cc_addresses=(),
        bcc_addresses=(),
        reply_to=None,
        subject="Your receipt",
        text_body="Thanks for your order.",
        html_body=None,
        headers={},
        attachments=[],
        metadata={},
        transport=None,
        priority=0,
        scheduled_at=NOW,
        expires_at=None,
        created_at=NOW,
        message_id=MESSAGE_ID,
    )
    fields.update(overrides)
    return Delivery(**fields)


def run(
    delivery: Delivery | None = None,
    *,
    default_from: str | None = None,
    max_message_bytes: int = 1_000_000,
    text_alternative: bool = True,
    **overrides: Any,
) -> ComposedMessage:
    return compose(
        delivery if delivery is not None else make_delivery(**overrides),
        default_from=default_from,
        max_message_bytes=max_message_bytes,
        now=NOW,
        text_alternative=text_alternative,
    )


def parse(composed: ComposedMessage) -> EmailMessage:
    return BytesParser(policy=email.policy.default).parsebytes(composed.data)


def attachment(filename: str = "a.bin", content_type: str = "application/octet-stream",
               data: bytes = b"\x00\x01binary\xff") -> dict[str, str]:
    return {
        "filename": filename,
        "content_type": content_type,
        "content_base64": base64.b64encode(data).decode("ascii"),
    }


def text(part: EmailMessage) -> str:
    """A text part's content with the wire's CRLF turned back into LF."""
    content = part.get_content()
    assert isinstance(content, str)
    return content.replace("\r\n", "\n")


def addresses(parsed: EmailMessage, name: str) -> list[tuple[str, str]]:
    return [(a.display_name, a.addr_spec) for a in parsed[name].addresses]


# -- bodies and MIME structure ----------------------------------------------


def test_text_only_is_text_plain() -> None:
    parsed = parse(run(text_body="Hello Alice,\nthanks."))
    assert parsed.get_content_type() == "text/plain"
    assert not parsed.is_multipart()
    assert text(parsed) == "Hello Alice,\nthanks.\n"


def test_html_only_is_text_html_without_the_text_alternative() -> None:
    parsed = parse(run(text_body=None, html_body="<p>Hello</p>", text_alternative=False))
    assert parsed.get_content_type() == "text/html"
    assert text(parsed) == "<p>Hello</p>\n"


RECEIPT_HTML = (
    "<html><head><style>p { color: red }</style><script>document.title = 'x'</script></head><body>"
    "<h1>Your order</h1><p>Hello <b>Zoë</b>, track it <a href='https://shop.example.com/o/1'>here</a>.</p>"
    "<ul><li>Blue mug</li><li>Beans</li></ul><img src='https://shop.example.com/pixel.gif' alt='logo'>"
    "</body></html>"
)


def test_html_only_gets_a_text_alternative_with_its_links() -> None:
    composed = run(text_body=None, html_body=RECEIPT_HTML)
    check_composed(composed)
    parsed = parse(composed)
    assert parsed.get_content_type() == "multipart/alternative"
    plain, html = parsed.iter_parts()
    assert (plain.get_content_type(), html.get_content_type()) == ("text/plain", "text/html")
    assert text(html) == RECEIPT_HTML + "\n"
    rendered = text(plain)
    assert "Hello Zoë, track it [here](https://shop.example.com/o/1)." in rendered
    assert "Blue mug" in rendered and "Beans" in rendered
    assert "color" not in rendered and "document.title" not in rendered and "<" not in rendered
    assert composed.fields is not None and composed.fields.text == rendered  # providers get it too


@pytest.mark.parametrize("html", ["", "<!-- nothing -->", "<img src='https://x.example/a.png'>"])
def test_html_without_readable_text_goes_html_only(html: str) -> None:
    parsed = parse(run(text_body=None, html_body=html))
    assert parsed.get_content_type() == "text/html"


def test_a_row_with_its_own_text_keeps_it() -> None:
    plain, _ = parse(run(text_body="mine", html_body=RECEIPT_HTML)).iter_parts()
    assert text(plain) == "mine\n"


def test_an_internationalised_address_is_written_as_utf8() -> None:
    composed = run(from_address="Zoë <zoë@example.com>", to_addresses=("jörg@bücher.example.com",),
                   reply_to="東京@example.com")
    check_composed(composed)
    assert composed.sender == "zoë@example.com"
    assert composed.recipients == ("jörg@xn--bcher-kva.example.com",)
    head, _, body = composed.data.partition(b"\r\n\r\n")
    assert body.isascii()
    assert "<zoë@example.com>" in head.decode("utf-8") and "jörg@xn--bcher-kva.example.com" in head.decode("utf-8")
    parsed = email.message_from_string(composed.data.decode("utf-8"), policy=email.policy.default)
    assert parsed["From"].addresses[0].display_name == "Zoë"
    assert parsed["From"].addresses[0].username == "zoë"
    assert parsed["Reply-To"].addresses[0].username == "東京"


def test_ascii_rows_stay_pure_ascii() -> None:
    composed = run(from_address="Zoë Müller <zoe@example.com>", subject="Grüße")
    assert composed.data.isascii()


def test_text_and_html_are_alternatives_text_first() -> None:
    parsed = parse(run(text_body="plain", html_body="<b>rich</b>"))
    assert parsed.get_content_type() == "multipart/alternative"
    parts = list(parsed.iter_parts())
    assert [p.get_content_type() for p in parts] == ["text/plain", "text/html"]
    assert [text(p) for p in parts] == ["plain\n", "<b>rich</b>\n"]


def test_non_ascii_bodies_round_trip() -> None:
    body = "Grüße, 東京 — ✓\nzweite Zeile"
    parsed = parse(run(text_body=body, html_body="<p>Ünïcödé</p>"))
    plain, html = parsed.iter_parts()
    assert text(plain) == body + "\n"
    assert text(html) == "<p>Ünïcödé</p>\n"


def test_attachments_wrap_the_body_in_multipart_mixed() -> None:
    pdf = b"%PDF-1.7\x00\xff" * 50
    parsed = parse(run(
        text_body="see attached",
        html_body="<p>see attached</p>",
        attachments=[attachment("invoice.pdf", "application/pdf", pdf),
                     attachment("all-bytes.bin", data=bytes(range(256)))],
    ))
    assert parsed.get_content_type() == "multipart/mixed"
    body, first, second = parsed.iter_parts()
    assert body.get_content_type() == "multipart/alternative"
    assert first.get_content_type() == "application/pdf"
    assert first.get_filename() == "invoice.pdf"
    assert first.get_content_disposition() == "attachment"
    assert first.get_content() == pdf
    assert second.get_content() == bytes(range(256))


def test_attachment_with_html_only_body() -> None:
    parsed = parse(run(text_body=None, html_body="<p>x</p>", attachments=[attachment()], text_alternative=False))
    body, att = parsed.iter_parts()
    assert body.get_content_type() == "text/html"
    assert att.get_content() == b"\x00\x01binary\xff"
    body, att = parse(run(text_body=None, html_body="<p>x</p>", attachments=[attachment()])).iter_parts()
    assert [p.get_content_type() for p in body.iter_parts()] == ["text/plain", "text/html"]
    assert att.get_content() == b"\x00\x01binary\xff"


@pytest.mark.parametrize("filename", [
    "résumé.pdf", "東京 レポート.txt", 'quote " and back\\slash.txt', "ü" * 120 + ".txt",
])
def test_attachment_filenames_round_trip(filename: str) -> None:
    parsed = parse(run(attachments=[attachment(filename, "text/plain", b"hi")]))
    _, att = parsed.iter_parts()
    assert att.get_filename() == filename


def test_body_containing_the_boundary_does_not_break_the_structure() -> None:
    first = run(attachments=[attachment()])
    boundary = parse(first).get_boundary()
    assert boundary
    hostile = f"--{boundary}\nContent-Type: text/html\n\n<script>\n--{boundary}--\n"
    parsed = parse(run(text_body=hostile, attachments=[attachment()]))
    assert parsed.get_boundary() != boundary
    body, att = parsed.iter_parts()
    assert text(body) == hostile
    assert att.get_content() == b"\x00\x01binary\xff"


def test_ascii_control_characters_in_body_are_encoded_not_sent_raw() -> None:
    composed = run(text_body="a\x00b\x1bc")
    assert b"\x00" not in composed.data and b"\x1b" not in composed.data
    assert text(parse(composed)) == "a\x00b\x1bc\n"


# -- wire format -------------------------------------------------------------


def test_message_is_ascii_with_crlf_line_endings_only() -> None:
    composed = run(subject="Grüße " * 40, text_body="line1\nline2\rline3\r\nü", html_body="<p>é</p>",
                   to_addresses=tuple(f"Person {i} <p{i}@example.com>" for i in range(10)),
                   headers={"X-Long": "word " * 40}, attachments=[attachment("é" * 80 + ".txt")])
    assert composed.data.count(b"\r\n ") > 10  # folded headers are covered too
    assert composed.data.isascii()
    assert re.search(rb"(?<!\r)\n", composed.data) is None
    assert re.search(rb"\r(?!\n)", composed.data) is None
    assert max(len(line) for line in composed.data.split(b"\r\n")) <= 998


def test_same_row_composes_to_identical_bytes() -> None:
    delivery = make_delivery(text_body="t", html_body="<p>h</p>", attachments=[attachment()])
    assert run(delivery) == run(delivery)


# -- headers -----------------------------------------------------------------


def test_originator_and_destination_headers() -> None:
    parsed = parse(run(
        from_address='"Shop, Inc." <shop@example.com>',
        to_addresses=("Alice Example <alice@example.com>", "bob@example.org"),
        cc_addresses=("carol@example.com",),
        reply_to="Support <support@example.com>",
    ))
    assert addresses(parsed, "from") == [("Shop, Inc.", "shop@example.com")]
    assert addresses(parsed, "to") == [("Alice Example", "alice@example.com"), ("", "bob@example.org")]
    assert addresses(parsed, "cc") == [("", "carol@example.com")]
    assert addresses(parsed, "reply-to") == [("Support", "support@example.com")]
    assert parsed["subject"] == "Your receipt"
    assert parsed["date"].datetime == NOW
    assert parsed["mime-version"] == "1.0"


def test_optional_headers_are_absent_when_empty() -> None:
    parsed = parse(run())
    assert [k.lower() for k in parsed] == [
        "date", "from", "to", "subject", "message-id", "mime-version",
        "content-type", "content-transfer-encoding",
    ]  # no Cc, Reply-To or Bcc


def test_date_keeps_the_given_offset() -> None:
    tz = timezone(timedelta(hours=2))
    composed = compose(make_delivery(), default_from=None, max_message_bytes=10_000,
                       now=NOW.astimezone(tz))
    assert parse(composed)["date"].datetime == NOW
    assert b"+0200" in composed.data


@pytest.mark.parametrize("subject", [
    "Grüße aus Köln", "東京の天気", "emoji 🎉 party", "x" * 300, "ü" * 300,
    "=?utf-8?q?looks_encoded?=", "100% off: a, b; <c> \"d\"",
])
def test_subject_round_trips(subject: str) -> None:
    composed = run(subject=subject)
    assert parse(composed)["subject"] == subject
    assert composed.data.isascii()


@pytest.mark.parametrize("raw, name", [
    ("Jörg Müller <jorg@example.com>", "Jörg Müller"),
    ('"Müller, Jörg" <jorg@example.com>', "Müller, Jörg"),
    ('"say \\"hi\\"" <jorg@example.com>', 'say "hi"'),
    ("山田 太郎 <yamada@example.com>", "山田 太郎"),
    ('"=?utf-8?q?Admin?=" <jorg@example.com>', "=?utf-8?q?Admin?="),
])
def test_display_names_round_trip(raw: str, name: str) -> None:
    parsed = parse(run(to_addresses=(raw,), from_address=raw))
    assert parsed["to"].addresses[0].display_name == name
    assert parsed["from"].addresses[0].display_name == name
    assert len(parsed["to"].addresses) == 1


def test_encoded_word_in_input_cannot_smuggle_a_header() -> None:
    # Python < 3.11.10 decoded such words and wrote the CR/LF back (CVE-2024-6923).
    evil = "=?utf-8?q?hi=0D=0ABcc:_spy@example.org?="
    parsed = parse(run(
        subject=evil,
        headers={"X-Note": evil},
        to_addresses=(f'"{evil}" <alice@example.com>',),
    ))
    assert "bcc" not in {k.lower() for k in parsed}
    assert parsed["subject"] == evil
    assert parsed["x-note"] == evil
    assert addresses(parsed, "to") == [(evil, "alice@example.com")]


def test_custom_headers_are_added_and_long_urls_stay_literal() -> None:
    url = "<https://example.com/unsubscribe/" + "a1b2" * 40 + ">"
    parsed = parse(run(headers={
        "List-Unsubscribe": url,
        "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
        "X-Campaign": "Frühling 2026",
    }))
    assert parsed["list-unsubscribe"] == url
    assert parsed["list-unsubscribe-post"] == "List-Unsubscribe=One-Click"
    assert parsed["x-campaign"] == "Frühling 2026"
    assert url.encode() in run(headers={"List-Unsubscribe": url}).data


def test_from_defaults_to_the_configured_sender() -> None:
    composed = run(from_address=None, default_from="Default <noreply@example.org>")
    assert composed.sender == "noreply@example.org"
    assert addresses(parse(composed), "from") == [("Default", "noreply@example.org")]


def test_row_from_address_wins_over_default() -> None:
    composed = run(default_from="noreply@example.org")
    assert composed.sender == "shop@example.com"


# -- envelope ----------------------------------------------------------------


def test_bcc_goes_to_the_envelope_only() -> None:
    composed = run(bcc_addresses=("Spy <hidden@example.org>",), cc_addresses=("c@example.com",))
    assert composed.recipients == ("alice@example.com", "c@example.com", "hidden@example.org")
    assert b"hidden" not in composed.data.lower()
    assert b"spy" not in composed.data.lower()
    assert "bcc" not in {k.lower() for k in parse(composed)}


def test_envelope_recipients_are_deduplicated_case_insensitively_in_order() -> None:
    composed = run(
        to_addresses=("A@example.com", "Bob <b@example.org>"),
        cc_addresses=("a@EXAMPLE.com", "d@example.com"),
        bcc_addresses=("B@example.org", "c@example.com", "d@example.com"),
    )
    assert composed.recipients == ("A@example.com", "b@example.org", "d@example.com", "c@example.com")


def test_idn_domains_become_punycode_in_envelope_and_headers() -> None:
    composed = run(
        from_address="Bücherei <info@bücher.example.com>",
        to_addresses=("Zoë <zoe@müller.example.org>",),
        bcc_addresses=("x@例え.example.com",),
    )
    assert composed.sender == "info@xn--bcher-kva.example.com"
    assert composed.recipients == (
        "zoe@xn--mller-kva.example.org", "x@xn--r8jz45g.example.com",
    )
    parsed = parse(composed)
    assert addresses(parsed, "to") == [("Zoë", "zoe@xn--mller-kva.example.org")]
    assert composed.data.isascii()


# -- Message-ID --------------------------------------------------------------


def test_the_message_id_is_the_one_the_claim_wrote_on_every_attempt() -> None:
    first = run(make_delivery(attempts=1))
    retry = compose(make_delivery(attempts=3), default_from=None, max_message_bytes=1_000_000,
                    now=NOW + timedelta(hours=1))
    assert first.message_id == retry.message_id == MESSAGE_ID
    assert parse(first)["message-id"] == MESSAGE_ID
    assert KEY.encode() not in first.data


@pytest.mark.parametrize("message_id", [
    None, "", "<x@example.com>", "0662a1b2c3d4e5f6a7b8c9d0e1f2a3b4@example.com",
    "<0662a1b2c3d4e5f6a7b8c9d0e1f2a3b4@example.com>\r\nBcc: victim@example.net",
    "<0662a1b2c3d4e5f6a7b8c9d0e1f2a3b4@example.com>\nX: y", "<0662A1B2C3D4E5F6A7B8C9D0E1F2A3B4@example.com>",
    "<0662a1b2c3d4e5f6a7b8c9d0e1f2a3b4@bücher.example>", "<0662a1b2c3d4e5f6a7b8c9d0e1f2a3b4@-example.com>",
    "<0662a1b2c3d4e5f6a7b8c9d0e1f2a3b4@example.com> ",
])
def test_a_message_id_not_of_the_claims_form_is_refused(message_id: object) -> None:
    # the column is the daemon's, but anyone with UPDATE on the table could write a header line into it
    with pytest.raises(CompositionError) as exc:
        run(make_delivery(message_id=message_id))
    assert exc.value.field == "message_id"


# -- size --------------------------------------------------------------------


def test_size_limit_is_inclusive() -> None:
    size = len(run().data)
    assert len(run(max_message_bytes=size).data) == size
    with pytest.raises(CompositionError) as info:
        run(max_message_bytes=size - 1)
    assert info.value.field == "message"
    assert info.value.reason == f"composed message is {size} bytes, over the limit of {size - 1}"


def test_huge_attachment_is_refused_before_building() -> None:
    with pytest.raises(CompositionError) as info:
        run(max_message_bytes=1000, attachments=[attachment(data=b"x" * 3000)])
    assert info.value.field == "message"
    assert "over the limit of 1000" in info.value.reason


# -- bad input ---------------------------------------------------------------

BAD_INPUTS: list[tuple[str, dict[str, Any], str]] = [
    ("subject CRLF", {"subject": "Hi\r\nBcc: spy@example.org"}, "subject"),
    ("subject LF", {"subject": "Hi\nthere"}, "subject"),
    ("subject CR", {"subject": "Hi\rthere"}, "subject"),
    ("subject tab", {"subject": "Hi\tthere"}, "subject"),
    ("subject NUL", {"subject": "Hi\x00"}, "subject"),
    ("subject NEL", {"subject": "Hi\x85there"}, "subject"),
    ("subject line separator", {"subject": "Hi\u2028there"}, "subject"),
    ("subject not a string", {"subject": None}, "subject"),
    ("display name CRLF", {"to_addresses": ("alice@example.com",
                                            "Eve\r\nBcc: spy@example.org <eve@example.com>")},
     "to_addresses[1]"),
    ("quoted display name LF", {"cc_addresses": ('"Eve\nX: y" <eve@example.com>',)}, "cc_addresses[0]"),
    ("address LF", {"to_addresses": ("alice@example.com\nspy@example.org",)}, "to_addresses[0]"),
    ("address CR", {"bcc_addresses": ("alice@example.com\r",)}, "bcc_addresses[0]"),
    ("from CRLF", {"from_address": "shop@example.com\r\nBcc: spy@example.org"}, "from_address"),
    ("reply-to LF", {"reply_to": "r@example.com\nX: y"}, "reply_to"),
    ("invalid address", {"to_addresses": ("alice@example.com", "not-an-address")}, "to_addresses[1]"),
    ("unquoted comma in name", {"to_addresses": ("Smith, John <j@example.com>",)}, "to_addresses[0]"),
    ("invalid reply-to", {"reply_to": "nobody"}, "reply_to"),
    ("invalid from", {"from_address": "shop@"}, "from_address"),
    ("no recipients", {"to_addresses": ()}, "to_addresses"),
    ("to not a list", {"to_addresses": "alice@example.com"}, "to_addresses"),
    ("to element not a string", {"to_addresses": (None,)}, "to_addresses[0]"),
    ("header value CRLF", {"headers": {"X-Foo": "a\r\nBcc: spy@example.org"}}, "headers.X-Foo"),
    ("header value LF", {"headers": {"X-Foo": "a\nb"}}, "headers.X-Foo"),
    ("header value int", {"headers": {"X-Count": 3}}, "headers.X-Count"),
    ("header value null", {"headers": {"X-Foo": None}}, "headers.X-Foo"),
    ("header value list", {"headers": {"X-Foo": ["a"]}}, "headers.X-Foo"),
    *[(f"reserved {name}", {"headers": {name: "x"}}, f"headers.{name}") for name in (
        "Bcc", "bcc", "FROM", "To", "cc", "Reply-To", "sender", "Subject", "MESSAGE-ID", "Date",
        "Mime-Version", "Return-Path", "received", "Content-Type", "content-transfer-encoding",
        "CONTENT-DISPOSITION", "Content-Anything", "Resent-Bcc",
    )],
    ("header name with space", {"headers": {"X Foo": "x"}}, "headers"),
    ("header name with colon", {"headers": {"X:Foo": "x"}}, "headers"),
    ("header name with CRLF", {"headers": {"X-A\r\nBcc": "x"}}, "headers"),
    ("header name empty", {"headers": {"": "x"}}, "headers"),
    ("header name non-ascii", {"headers": {"X-Ünï": "x"}}, "headers"),
    ("header name too long", {"headers": {"X" * 77: "x"}}, "headers"),
    ("header name not a string", {"headers": {1: "x"}}, "headers"),
    ("headers not a dict", {"headers": [("X-Foo", "x")]}, "headers"),
    ("attachments not a list", {"attachments": {"filename": "a"}}, "attachments"),
    ("attachment not a dict", {"attachments": ["YWJj"]}, "attachments[0]"),
    ("attachment missing key", {"attachments": [
        {"filename": "a.txt", "content_type": "text/plain"}]}, "attachments[0]"),
    ("attachment extra key", {"attachments": [{**attachment(), "disposition": "inline"}]},
     "attachments[0]"),
    ("second attachment bad", {"attachments": [attachment(), "x"]}, "attachments[1]"),
    ("attachment filename not str", {"attachments": [{**attachment(), "filename": 7}]},
     "attachments[0].filename"),
    ("attachment bad base64", {"attachments": [{**attachment(), "content_base64": "not base64!"}]},
     "attachments[0].content_base64"),
    ("attachment base64 with newline", {"attachments": [
        {**attachment(), "content_base64": "YWJj\nZGVm"}]}, "attachments[0].content_base64"),
    ("attachment base64 bad padding", {"attachments": [
        {**attachment(), "content_base64": "YWJjZ"}]}, "attachments[0].content_base64"),
    ("attachment base64 non-ascii", {"attachments": [
        {**attachment(), "content_base64": "YWJjé"}]}, "attachments[0].content_base64"),
    *[(f"content type {ct!r}", {"attachments": [attachment(content_type=ct)]},
       "attachments[0].content_type") for ct in (
        "pdf", "", "text/", "/plain", "text/plain; charset=utf-8", "text/plain\r\nX-A: b",
        "text/plain\n", "multipart/mixed", "message/rfc822", "tëxt/plain",
    )],
    ("filename CRLF", {"attachments": [attachment("a\r\nContent-Type: text/html")]},
     "attachments[0].filename"),
    ("filename empty", {"attachments": [attachment("")]}, "attachments[0].filename"),
    ("filename too long", {"attachments": [attachment("a" * 256)]}, "attachments[0].filename"),
    ("filename encoded word", {"attachments": [attachment("=?utf-8?q?a=0Ab?=")]},
     "attachments[0].filename"),
    ("no body", {"text_body": None, "html_body": None}, "text_body"),
    ("text body not a string", {"text_body": b"bytes"}, "text_body"),
    ("html body not a string", {"html_body": 1}, "html_body"),
    ("text body lone surrogate", {"text_body": "a\ud800b"}, "text_body"),
    ("missing from", {"from_address": None}, "from_address"),
]


@pytest.mark.parametrize(
    "overrides, field", [case[1:] for case in BAD_INPUTS], ids=[case[0] for case in BAD_INPUTS]
)
def test_bad_input_is_refused_naming_the_field(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(CompositionError) as info:
        run(**overrides)
    assert info.value.field == field
    assert info.value.reason


def test_error_reason_names_the_invalid_address() -> None:
    with pytest.raises(CompositionError) as info:
        run(to_addresses=("alice@example.com", "x"))
    assert str(info.value).startswith("to_addresses[1]: invalid address 'x': ")


def test_parse_back_safety_net_refuses_a_broken_rendering(monkeypatch: pytest.MonkeyPatch) -> None:
    import outbox_mailer.message.compose as compose_module

    def leaky(name: str, value: str) -> str:
        return f"{name}: {value}\r\nBcc: spy@example.org\r\n"

    monkeypatch.setattr(compose_module, "unstructured", leaky)  # as compose() looks it up
    # Off the hot path: the parse-back check runs on request (and in the oracle tests).
    composed = run()
    with pytest.raises(CompositionError) as info:
        check_composed(composed)
    assert info.value.field == "message"
    with pytest.raises(CompositionError) as info:
        compose(make_delivery(), default_from=None, max_message_bytes=1_000_000,
                now=NOW, verify=True)
    assert info.value.field == "message"


@pytest.mark.parametrize("overrides", [
    {},
    {"text_body": None, "html_body": "<p>h</p>"},
    {"html_body": "<p>h</p>", "cc_addresses": ("c@example.com",), "reply_to": "r@example.com",
     "headers": {"X-A": "1"}, "attachments": [attachment(), attachment("é.txt", "text/plain")]},
])
def test_parse_back_check_accepts_what_compose_renders(overrides: dict[str, Any]) -> None:
    check_composed(run(**overrides))


def test_parse_back_check_refuses_a_changed_mime_tree() -> None:
    composed = run(html_body="<p>h</p>")
    boundary = parse(composed).get_boundary()
    assert boundary
    broken = composed.data.replace(f"--{boundary}--".encode(), b"", 1)
    broken = broken.replace(f"--{boundary}\r\nContent-Type: text/html".encode(),
                            b"Content-Type: text/html", 1)
    with pytest.raises(CompositionError):
        check_composed(dataclasses.replace(composed, data=broken))


def test_invalid_default_from_is_reported_as_from_address() -> None:
    with pytest.raises(CompositionError) as info:
        run(from_address=None, default_from="not an address")
    assert info.value.field == "from_address"


# -- property: no input text can add a header --------------------------------


_PRINTABLE = st.characters(blacklist_categories=("Cc", "Zl", "Zp", "Cs"))
_TRICKY = st.sampled_from([
    "\r\n", "\n", "\r", " ", "  ", "=?", "?=", "=?utf-8?q?", "=?utf-8?b?", "=0D=0A", ":", ",",
    "<", ">", '"', "\\", "Bcc: spy@example.org", "Content-Type: text/html", "ü", "東京", "🎉",
])
# Arbitrary text, plus text made of header-breaking fragments that is mostly valid.
_TEXT = st.one_of(
    st.text(),
    st.text(alphabet=_PRINTABLE),
    st.lists(st.one_of(_TRICKY, st.text(alphabet=_PRINTABLE, max_size=90)), max_size=8).map("".join),
)


@settings(max_examples=500, deadline=None)
@given(subject=_TEXT, value=_TEXT, name=_TEXT)
def test_arbitrary_text_never_adds_a_header(subject: str, value: str, name: str) -> None:
    quoted_name = '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
    delivery = make_delivery(
        subject=subject,
        headers={"X-Note": value},
        to_addresses=(f"{quoted_name} <alice@example.com>",),
    )
    try:
        composed = run(delivery)
    except CompositionError as exc:
        assert exc.field != "message", exc.reason  # the parse-back safety net never fires
        event(f"refused: {exc.field}")
        return
    event("composed")
    parsed = parse(composed)
    assert sorted(k.lower() for k in parsed) == sorted([
        "date", "from", "to", "subject", "message-id", "x-note", "mime-version",
        "content-type", "content-transfer-encoding",
    ])
    assert composed.data.isascii()
    assert text(parsed) == "Thanks for your order.\n"
    [(parsed_name, addr_spec)] = addresses(parsed, "to")
    assert addr_spec == "alice@example.com"
    name = name.strip()  # outer spaces of a display name are dropped
    if name.isascii() and len(name) <= 60 and "=?" not in name:  # sent as a quoted string
        assert parsed_name == name
    else:  # encoded words: Python's reader squeezes spaces inside and between them
        assert re.sub(r"\s", "", parsed_name) == re.sub(r"\s", "", name)
    assert parsed["subject"] in (subject, subject.lstrip(" "))
    assert parsed["x-note"] in (value, value.lstrip(" "))


# -- shortcuts on the hot path give the bytes of the straightforward code ------


_NEW_YORK = ZoneInfo("America/New_York")
_NOWS = st.one_of(
    st.datetimes(timezones=st.sampled_from([
        UTC, timezone(timedelta(hours=2)), timezone(timedelta(hours=-9, minutes=-30)),
        timezone(timedelta(seconds=-37)), timezone(timedelta(0), "Z"),
    ])),
    st.datetimes(),  # naive
    # zoneinfo: the offset depends on fold and skipped times exist, so these are never remembered
    st.datetimes(min_value=datetime(2026, 3, 8, 1), max_value=datetime(2026, 3, 8, 4),
                 timezones=st.just(_NEW_YORK), allow_imaginary=True),
    st.datetimes(min_value=datetime(2026, 11, 1, 0), max_value=datetime(2026, 11, 1, 3),
                 timezones=st.just(_NEW_YORK)),
)


@settings(max_examples=300, deadline=None)
@given(now=_NOWS)
def test_date_is_format_datetime(now: datetime) -> None:
    assert mime.format_date(now) == format_datetime(now)
    assert mime.format_date(now) == format_datetime(now)  # remembered or not, the same
    assert mime.format_date(now.replace(microsecond=999_999)) == format_datetime(now)


def fold_reference(name: str, words: list[str]) -> str:
    """fold_header() without its one-line shortcut."""
    lines = [f"{name}:"]
    for index, word in enumerate(words):
        if index and word and len(lines[-1]) + 1 + len(word) > 78:
            lines.append(f" {word}")
        else:
            lines[-1] += f" {word}"
    return "\r\n".join(lines) + "\r\n"


@st.composite
def _near_one_line(draw: st.DrawFn) -> tuple[str, str]:
    """A header name and a value that (almost) fill one 78-character line."""
    name = draw(st.sampled_from(["Subject", "X-Note", "To", "X-" + "L" * 74]))
    size = max(0, 78 - len(name) - 2 + draw(st.integers(-2, 2)))
    alphabet = draw(st.sampled_from(["ab ", "a", " a", "ab é"]))
    return name, "".join(draw(st.lists(st.sampled_from(alphabet), min_size=size, max_size=size)))


@settings(max_examples=300, deadline=None)
@given(header=st.one_of(_near_one_line(), st.tuples(st.just("Subject"), st.text("ab ", max_size=200))))
def test_one_line_shortcuts_fold_as_the_loop_does(header: tuple[str, str]) -> None:
    name, value = header
    words = value.split(" ")
    assert mime.fold_header(name, words) == fold_reference(name, words)
    assert mime.fold_header(name, [value]) == fold_reference(name, [value])
    if value.isascii() and "=?" not in value and not value.startswith(" "):
        assert unstructured(name, value) == fold_reference(name, words)


@settings(max_examples=300, deadline=None)
@given(body=st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300),
    st.lists(st.sampled_from(["a", "é", "\n", "\r", "\r\n", "\x00", "\x7f", "=", " ", "x" * 79]), max_size=40).map("".join),
))
def test_text_part_is_7bit_when_it_can_be_else_the_shorter_encoding(body: str) -> None:
    head, payload = mime.text_part(body, "plain").split(b"\r\n\r\n", 1)
    data = body.encode("utf-8")
    lines = data.splitlines()
    crlf = b"\r\n".join(lines) + b"\r\n"
    seven_bit = data.isascii() and all(len(line) <= 78 for line in lines) and not re.search(
        rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]", data)
    qp = binascii.b2a_qp(b"\n".join(lines) + b"\n", istext=True).replace(b"\n", b"\r\n")
    b64 = base64.encodebytes(crlf).replace(b"\n", b"\r\n")
    if seven_bit:
        assert head.endswith(b"7bit") and payload == crlf
    elif len(qp) <= len(b64):
        assert head.endswith(b"quoted-printable") and payload == qp
    else:
        assert head.endswith(b"base64") and payload == b64


def test_long_html_goes_html_only_rather_than_hold_the_daemon() -> None:
    from outbox_mailer.message.text_alternative import MAX_HTML_BYTES

    html = "<p>" + "x" * (MAX_HTML_BYTES - 7) + "</p>"
    assert parse(run(text_body=None, html_body=html)).get_content_type() == "multipart/alternative"
    assert parse(run(text_body=None, html_body=html + " ")).get_content_type() == "text/html"


def test_a_text_alternative_never_pushes_a_row_over_the_size_limit() -> None:
    html = "<p>" + "word " * 6_000 + "</p>"  # 30 KB: fits alone, not with its rendering
    alone = run(text_body=None, html_body=html, text_alternative=False)
    limit = len(alone.data) + 1000
    composed = run(text_body=None, html_body=html, max_message_bytes=limit)
    assert composed.data == alone.data
    assert composed.fields is not None and composed.fields.text is None
    assert parse(run(text_body=None, html_body=html, max_message_bytes=2 * limit)).is_multipart()
