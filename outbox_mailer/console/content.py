"""An email's content for the console: its composed headers, and its HTML body in a sandbox.

The HTML body is hostile input shown to an operator who can resend mail. It is served on its own
URL, framed by the email's page with ``<iframe sandbox="">``, and with a Content-Security-Policy
that sandboxes it again for whoever opens the URL directly: no script, a unique origin, no forms,
no top navigation, and nothing loaded from anywhere (a tracking pixel must not fire because an
operator looked). ``remote=True``, when the operator asks for that one message, lets images,
stylesheets and fonts load; script, forms and frames stay refused, and ``<link>`` elements other than
stylesheets (prefetch, preconnect, prerender...: requests no directive of the policy governs in every
browser) are made inert elements before the body is served, in both modes.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from html.parser import HTMLParser
from typing import Any

from starlette.responses import Response

from ..delivery import Delivery
from ..errors import CompositionError
from ..message.compose import compose
from ..message.message_ids import is_message_id
from ..settings.config import Settings

PLACEHOLDER_ID = "<00000000000000000000000000000000@message-id.invalid>"  # before the first claim writes one
_SANDBOX = ("sandbox; default-src 'none'; style-src 'unsafe-inline'{remote}; img-src data:{remote}; "
            "font-src data:{remote}; form-action 'none'; base-uri 'none'; frame-ancestors 'self'")


def html_preview(html: str, *, remote: bool) -> Response:
    csp = _SANDBOX.format(remote=" https: http:" if remote else "")
    return Response(inert_links(html), media_type="text/html; charset=utf-8", headers={
        "Content-Security-Policy": csp, "X-Frame-Options": "SAMEORIGIN", "Referrer-Policy": "no-referrer"})


class _Links(HTMLParser):
    """Where each ``<link>`` start tag that is not a stylesheet begins, as (line, column)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[int, int]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        rels = " ".join(value or "" for name, value in attrs if name == "rel").lower().split()
        if tag == "link" and rels != ["stylesheet"]:
            self.found.append(self.getpos())

    handle_startendtag = handle_starttag


def inert_links(html: str) -> str:
    """``html`` with each ``<link`` that is not a stylesheet renamed ``<x-link`` (an element that loads nothing)."""
    parser = _Links()
    parser.feed(html)
    parser.close()
    if not parser.found:
        return html
    starts = [0]  # where each line begins, lines as the parser counts them (ended by "\n" only)
    for line in html.split("\n"):
        starts.append(starts[-1] + len(line) + 1)
    out, done = [], 0
    for number, column in parser.found:
        at = starts[number - 1] + column + 1  # after "<"
        out += [html[done:at], "x-"]
        done = at
    return "".join(out) + html[done:]


def composed_headers(row: dict[str, Any], settings: Settings) -> str:
    """The header block the daemon would send for ``row`` (its Date: now), or why it cannot be composed (a row
    naming a template has no Subject until the daemon renders it)."""
    if row.get("template") is not None:
        return "(composed when it is sent, with the Subject rendered from its template)"
    message_id = row["message_id"] if is_message_id(row["message_id"]) else PLACEHOLDER_ID
    delivery = Delivery(
        id=row["id"], dedupe_key=row["dedupe_key"], claim_token=uuid.UUID(int=0), attempts=row["attempts"],
        max_attempts=row["max_attempts"], from_address=row["from_address"],
        to_addresses=tuple(row["to_addresses"]), cc_addresses=tuple(row["cc_addresses"]),
        bcc_addresses=tuple(row["bcc_addresses"]), reply_to=row["reply_to"], subject=row["subject"],
        text_body=row["text_body"], html_body=row["html_body"], headers=_json(row["headers"], {}),
        attachments=_json(row["attachments"], []), metadata={}, transport=row["transport"],
        priority=row["priority"], scheduled_at=row["scheduled_at"] or datetime.now(UTC), expires_at=None,
        created_at=row["created_at"] or datetime.now(UTC), message_id=message_id)
    try:
        message = compose(delivery, default_from=settings.default_from, max_message_bytes=settings.max_message_bytes,
                          now=datetime.now(UTC), text_alternative=settings.text_alternative,
                          address_policy=settings.address_policy())
    except CompositionError as exc:
        return f"(cannot be composed: {exc})"
    head = message.data.split(b"\r\n\r\n", 1)[0].decode("utf-8", "replace").replace("\r\n", "\n")
    if message_id == PLACEHOLDER_ID:
        head += "\n\n(The Message-ID is written when the email is first claimed.)"
    return head


def _json(value: Any, empty: Any) -> Any:
    if value is None:
        return empty
    return json.loads(value) if isinstance(value, str) else value
