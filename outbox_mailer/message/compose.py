"""Turn a claimed row into the exact bytes to send (pure: no I/O, no clock).

:func:`compose` validates every field of a :class:`~outbox_mailer.delivery.Delivery`
and returns a :class:`~outbox_mailer.delivery.ComposedMessage`: the envelope (ASCII, or
UTF-8 for an internationalised address),
the ``Message-ID`` its first claim wrote (:mod:`outbox_mailer.message.message_ids`) and an RFC 5322 message
with CRLF line endings.
Anything that cannot become a safe message raises
:class:`~outbox_mailer.errors.CompositionError` naming the field
(``to_addresses[1]``, ``headers.X-Foo``, ``attachments[0].content_base64`` ...).

How it is built:

* The MIME body (text/plain, text/html, multipart/alternative, multipart/mixed
  with attachments) is assembled directly by :mod:`outbox_mailer.message.mime`
  (``EmailMessage`` costs about 1 ms a message): 7bit, quoted-printable or
  base64, so the body is pure ASCII and needs no 8BITMIME.  An HTML-only row
  gets a text alternative (:mod:`outbox_mailer.message.text_alternative`) unless
  ``text_alternative=False``.  Multipart
  boundaries are derived from the Message-ID and checked against every part,
  so the same row always gives the same bytes.
* The top-level headers (Date, From, To, Cc, Reply-To, Subject, Message-ID and
  the row's own headers) are rendered here: values are checked for control
  characters first, then written as plain ASCII folded at spaces, or as
  RFC 2047 encoded words when they are non-ASCII or contain ``=?``.  The one
  exception is an address with a non-ASCII local part (RFC 6532): its
  addr-spec is written as UTF-8, and the transport must offer SMTPUTF8.  The
  standard library's folder is not used for them because Python 3.11 before
  3.11.10 decodes encoded words found in the input and writes the decoded
  CR/LF back out (CVE-2024-6923), and it turns long URLs into encoded words.
  A row's own ASCII header value is never encoded: a word (a URL, a token)
  must fit on one ``Name: word`` line of 998 octets or the row is refused, and
  the RFC 2369 ``List-*`` URL lists fold only between their ``<url>`` items.
* :func:`check_composed` parses a result back and refuses it if its header
  names or MIME tree differ from what was intended.  It is a debugging and
  test aid (``compose(..., verify=True)``), not on the hot path: the property
  test ``tests/unit/test_compose_oracle.py`` shows, against messages built
  with ``EmailMessage``, that every valid row parses back to the same headers,
  addresses, bodies and attachments and that no input can add a header.
* Bcc recipients go into the envelope only, never into a header.
"""

from __future__ import annotations

import email.policy
import re
from datetime import datetime
from email.message import MIMEPart
from email.parser import BytesParser, Parser
from operator import attrgetter

from ..delivery import (
    AttachmentFields,
    ComposedMessage,
    Delivery,
    MessageFields,
)
from ..errors import CompositionError
from . import mime
from .addresses import (
    DEFAULT_POLICY,
    AddressPolicy,
    ParsedAddress,
    checked_text,
    parse_address,
    parse_address_list,
)
from .attachments import checked_attachments
from .header_fields import (
    address_header,
    checked_custom_headers,
    unstructured,
)
from .message_ids import is_message_id
from .text_alternative import MAX_HTML_BYTES, text_from_html

__all__ = ["check_composed", "compose"]

_DISPLAY = attrgetter("display")


def compose(
    delivery: Delivery,
    *,
    default_from: str | None,
    max_message_bytes: int,
    now: datetime,
    text_alternative: bool = True,
    verify: bool = False,
    address_policy: AddressPolicy = DEFAULT_POLICY,
) -> ComposedMessage:
    """Validate ``delivery`` and render it; raise CompositionError if it cannot be sent.

    ``text_alternative``: an HTML-only row also gets a text/plain rendering of its HTML.
    ``verify=True`` also parses the result back (:func:`check_composed`): for debugging.
    ``address_policy``: what the addresses may be (the settings' ``address_policy()``).
    """
    sender = _sender(delivery.from_address, default_from, address_policy)
    to = parse_address_list(delivery.to_addresses, "to_addresses", address_policy)
    if not to:
        raise CompositionError("to_addresses", "at least one recipient is required")
    cc = parse_address_list(delivery.cc_addresses, "cc_addresses", address_policy)
    bcc = parse_address_list(delivery.bcc_addresses, "bcc_addresses", address_policy)
    reply_to = None if delivery.reply_to is None else parse_address(delivery.reply_to, "reply_to", address_policy)
    subject = checked_text(delivery.subject, "subject")
    custom = checked_custom_headers(delivery.headers)
    text_body, html_body = delivery.text_body, delivery.html_body
    text_data, html_data = _checked_bodies(text_body, html_body)
    generated = False
    if text_body is None and html_body is not None and text_alternative and len(html_data or b"") <= MAX_HTML_BYTES:
        generated = True
        text_body = text_from_html(html_body)
        text_data = None if text_body is None else text_body.encode("utf-8")
    attachments = checked_attachments(delivery.attachments, max_message_bytes)

    # From here on every part is checked: rendering calls no validation.
    message_id = delivery.message_id
    if message_id is None or not is_message_id(message_id):
        raise CompositionError("message_id", f"not a Message-ID the claim wrote: {message_id!r}")
    headers = [
        unstructured("Date", mime.format_date(now)),
        address_header("From", (sender,)),
        address_header("To", to),
    ]
    if cc:
        headers.append(address_header("Cc", cc))
    if reply_to is not None:
        headers.append(address_header("Reply-To", (reply_to,)))
    headers.append(unstructured("Subject", subject))
    headers.append(unstructured("Message-ID", message_id))
    headers.extend(unstructured(name, value) for name, value in custom)
    headers.append("MIME-Version: 1.0\r\n")

    parts = [(a.data, f"{a.maintype}/{a.subtype}", a.filename, a.content_id) for a in attachments]
    head = "".join(headers).encode("utf-8")  # ASCII unless an address is internationalised
    data = head + mime.body(text_data, html_data, parts, seed=message_id[1:33])
    if len(data) > max_message_bytes and generated and text_data is not None:
        # the text alternative is a courtesy: never the reason a row fails
        text_body = text_data = None
        data = head + mime.body(None, html_data, parts, seed=message_id[1:33])
    if len(data) > max_message_bytes:
        raise CompositionError(
            "message",
            f"composed message is {len(data)} bytes, over the limit of {max_message_bytes}",
        )
    fields = MessageFields(
        sender.display,
        tuple(map(_DISPLAY, to)),
        tuple(map(_DISPLAY, cc)),
        tuple(map(_DISPLAY, bcc)),
        None if reply_to is None else reply_to.display,
        subject,
        text_body,
        html_body,
        tuple(custom),
        tuple(AttachmentFields(a.filename, f"{a.maintype}/{a.subtype}", a.data, a.content_id) for a in attachments),
    )
    composed = ComposedMessage(
        sender.addr_spec,
        _envelope_recipients(to, cc, bcc, delivery.retry_recipients),
        message_id,
        data,
        fields,
    )
    if verify:
        check_composed(composed)
    return composed


# -- checking the row --------------------------------------------------------


def _sender(from_address: str | None, default_from: str | None, policy: AddressPolicy) -> ParsedAddress:
    if from_address is not None:
        return parse_address(from_address, "from_address", policy)
    if default_from is not None:
        return parse_address(default_from, "from_address", policy)
    raise CompositionError("from_address", "no from_address and no default sender configured")


def _checked_bodies(text: object, html: object) -> tuple[bytes | None, bytes | None]:
    """The bodies as UTF-8 (what the MIME parts are made of), or CompositionError."""
    if text is None and html is None:
        raise CompositionError("text_body", "one of text_body or html_body is required")
    return _utf8(text, "text_body"), _utf8(html, "html_body")


def _utf8(body: object, field: str) -> bytes | None:
    if body is None:
        return None
    if not isinstance(body, str):
        raise CompositionError(field, f"expected a string, got {type(body).__name__}")
    try:
        return body.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CompositionError(field, f"not valid Unicode at position {exc.start}") from exc


def _envelope_recipients(
    to: tuple[ParsedAddress, ...], cc: tuple[ParsedAddress, ...], bcc: tuple[ParsedAddress, ...],
    only: tuple[str, ...] | None = None,
) -> tuple[str, ...]:
    """Envelope recipients, deduplicated; ``only``: the ones an earlier attempt did not reach
    (the headers still name everyone: it is the same message)."""
    if only is None and len(to) == 1 and not cc and not bcc:  # most rows
        return (to[0].addr_spec,)
    seen: set[str] = set()
    recipients = []
    for address in (*to, *cc, *bcc):
        key = address.addr_spec.lower()
        if key not in seen:
            seen.add(key)
            recipients.append(address.addr_spec)
    if only is None:
        return tuple(recipients)
    wanted = {a.lower() for a in only}
    remaining = tuple(r for r in recipients if r.lower() in wanted)
    if not remaining:
        raise CompositionError("retry_recipients", "none of the recipients still owed is among the row's addresses")
    return remaining


# -- the safety net, for tests and debugging ---------------------------------


def check_composed(message: ComposedMessage) -> None:
    """Parse ``message.data`` back with the standard library; raise CompositionError
    (field ``message``) unless a reader sees exactly the intended headers and MIME tree.

    Not on the hot path: the property test in tests/unit/test_compose_oracle.py is the
    proof that compose() renders every valid row correctly.  ``compose(..., verify=True)``
    runs it on each message.
    """
    fields = message.fields
    assert fields is not None, "check_composed needs the fields set by compose()"
    data = message.data
    head, _, rest = data.partition(b"\r\n\r\n")
    parsed = (BytesParser(policy=email.policy.default).parsebytes(data) if head.isascii()
              else Parser(policy=email.policy.default).parsestr(data.decode("utf-8")))
    names = ["date", "from", "to"]
    names += ["cc"] * bool(fields.cc) + ["reply-to"] * (fields.reply_to is not None)
    names += ["subject", "message-id", *(name.lower() for name, _ in fields.headers), "mime-version"]
    tree = _expected_tree(fields)
    names += list(tree[1])
    if (
        not rest.isascii()
        or (not head.isascii() and not _has_utf8_address(message))
        or re.search(rb"\r(?!\n)|(?<!\r)\n", data)
        or max(map(len, data.split(b"\r\n"))) > 998
        or [name.lower() for name in parsed] != names
        or _mime_tree(parsed, root=True) != tree
    ):
        raise CompositionError(
            "message", "the rendered message does not parse back to the intended structure"
        )


def _has_utf8_address(message: ComposedMessage) -> bool:
    """Whether a header may hold UTF-8: only an internationalised addr-spec may (RFC 6532)."""
    reply_to = message.fields.reply_to if message.fields is not None else None
    addr_specs = (message.sender, *message.recipients, *([reply_to.rpartition("<")[2]] if reply_to else []))
    return not all(a.isascii() for a in addr_specs)


_TreeNode = tuple[str, tuple[str, ...], tuple["_TreeNode", ...]]
_LEAF_HEADERS = ("content-type", "content-transfer-encoding")


def _expected_tree(fields: MessageFields) -> _TreeNode:
    """The tree :func:`mime.body` builds (its docstring): inline parts related to the HTML."""
    inline = [a for a in fields.attachments if a.content_id is not None] if fields.html is not None else []
    files = [a for a in fields.attachments if a.content_id is None] if inline else list(fields.attachments)
    html: _TreeNode | None = None if fields.html is None else ("text/html", _LEAF_HEADERS, ())
    if html is not None and inline:
        html = ("multipart/related", ("content-type",), (html, *map(_attachment_node, inline)))
    texts = [node for node in (None if fields.text is None else ("text/plain", _LEAF_HEADERS, ()), html)
             if node is not None]
    body: _TreeNode = (
        texts[0] if len(texts) == 1 else ("multipart/alternative", ("content-type",), tuple(texts))
    )
    if not files:
        return body
    return ("multipart/mixed", ("content-type",), (body, *map(_attachment_node, files)))


def _attachment_node(attachment: AttachmentFields) -> _TreeNode:
    cid = ("content-id",) if attachment.content_id is not None else ()
    return (attachment.content_type, (*_LEAF_HEADERS, *cid, "content-disposition"), ())


def _mime_tree(part: MIMEPart, *, root: bool = False) -> _TreeNode:
    names = tuple(name.lower() for name in part)
    if root:  # the others are checked as the top-level header names
        names = tuple(name for name in names if name.startswith("content-"))
    return (part.get_content_type(), names, tuple(map(_mime_tree, part.iter_parts())))
