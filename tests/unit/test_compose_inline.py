"""Inline attachments (``content_id``): the HTML and its inline parts as multipart/related (RFC 2387)."""

from __future__ import annotations

import base64
from email.message import EmailMessage
from email.parser import BytesParser
from email.policy import default as default_policy
from typing import Any

import pytest

from outbox_mailer.errors import CompositionError
from outbox_mailer.message.compose import compose
from tests.unit.test_compose import NOW, make_delivery

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))
LOGO = {"filename": "logo.png", "content_type": "image/png", "content_base64": base64.b64encode(PNG).decode(),
        "content_id": "logo.1@shop.example"}
PDF = {"filename": "receipt.pdf", "content_type": "application/pdf", "content_base64": "JVBERi0="}
HTML = '<p>Thanks</p><img src="cid:logo.1@shop.example" alt="Shop">'


def composed(**overrides: Any) -> EmailMessage:
    message = compose(make_delivery(**overrides), default_from=None, max_message_bytes=10_000_000, now=NOW,
                      verify=True)
    parsed = BytesParser(policy=default_policy).parsebytes(message.data)
    assert isinstance(parsed, EmailMessage)
    return parsed


def tree(part: EmailMessage) -> Any:
    if part.is_multipart():
        return (part.get_content_type(), [tree(p) for p in part.iter_parts()])  # type: ignore[arg-type]  # parts of an EmailMessage are EmailMessages
    return part.get_content_type()


def test_html_and_its_inline_parts_are_related_inside_the_alternative_and_files_stay_in_mixed() -> None:
    message = composed(html_body=HTML, attachments=[LOGO, PDF])
    assert tree(message) == ("multipart/mixed", [
        ("multipart/alternative", ["text/plain", ("multipart/related", ["text/html", "image/png"])]),
        "application/pdf",
    ])
    related = next(p for p in message.walk() if p.get_content_type() == "multipart/related")
    html, logo = related.iter_parts()
    assert html.get_content_type() == "text/html"
    assert logo["Content-ID"] == "<logo.1@shop.example>"
    assert logo.get_content_disposition() == "inline"
    assert logo.get_filename() == "logo.png"
    assert logo.get_content() == PNG
    pdf = next(p for p in message.walk() if p.get_content_type() == "application/pdf")
    assert pdf.get_content_disposition() == "attachment" and pdf["Content-ID"] is None


def test_without_other_attachments_the_alternative_is_the_root_and_an_html_only_row_keeps_its_text() -> None:
    assert tree(composed(html_body=HTML, attachments=[LOGO])) == (
        "multipart/alternative", ["text/plain", ("multipart/related", ["text/html", "image/png"])])
    assert tree(composed(text_body=None, html_body=HTML, attachments=[LOGO])) == (
        "multipart/alternative", ["text/plain", ("multipart/related", ["text/html", "image/png"])])


def test_inline_parts_keep_their_row_order_within_related() -> None:
    second = {**LOGO, "filename": "b.gif", "content_type": "image/gif", "content_id": "b"}
    message = composed(html_body=HTML, attachments=[PDF, second, LOGO])
    related = next(p for p in message.walk() if p.get_content_type() == "multipart/related")
    assert [p["Content-ID"] for p in related.iter_parts()][1:] == ["<b>", "<logo.1@shop.example>"]


def test_without_html_an_inline_part_goes_into_mixed_with_its_content_id() -> None:
    message = composed(attachments=[LOGO])
    assert tree(message) == ("multipart/mixed", ["text/plain", "image/png"])
    [logo] = [p for p in message.walk() if p.get_content_type() == "image/png"]
    assert logo["Content-ID"] == "<logo.1@shop.example>" and logo.get_content_disposition() == "inline"


def test_a_null_content_id_is_an_ordinary_attachment() -> None:
    message = composed(html_body=HTML, attachments=[{**LOGO, "content_id": None}])
    assert tree(message) == ("multipart/mixed", [("multipart/alternative", ["text/plain", "text/html"]),
                                                 "image/png"])


@pytest.mark.parametrize(("content_id", "reason"), [
    ("<logo@shop.example>", "angle brackets"),
    ("logo\r\nBcc: victim@example.net", "control character"),
    ("logo png", "letters, digits"),
    ("", "1-250"),
    ("x" * 251, "1-250"),
    ("a@b@c", "at most one @"),
    ("@shop.example", "letters, digits"),
    ("logo@", "letters, digits"),
    ("lögo", "letters, digits"),
    (7, "expected a string"),
])
def test_a_bad_content_id_is_refused_naming_the_field(content_id: object, reason: str) -> None:
    with pytest.raises(CompositionError) as refused:
        composed(html_body=HTML, attachments=[PDF, {**LOGO, "content_id": content_id}])
    assert refused.value.field == "attachments[1].content_id"
    assert reason in refused.value.reason


def test_a_content_id_used_twice_in_a_row_is_refused_naming_the_second() -> None:
    with pytest.raises(CompositionError) as refused:
        composed(html_body=HTML, attachments=[LOGO, PDF, {**LOGO, "filename": "again.png"}])
    assert refused.value.field == "attachments[2].content_id"
    assert "attachments[0]" in refused.value.reason
