"""A plain-text alternative for rows that give only an HTML body.

An HTML-only message gives text-only clients and screen readers nothing
readable, and spam filters score it (SpamAssassin's ``MIME_HTML_ONLY``).
:func:`text_from_html` renders the HTML as text with inscriptis (Apache-2.0;
html2text would be the usual choice but is GPL-3.0, and this project is MIT):
it keeps the layout of headings, paragraphs, lists and tables, drops scripts
and styles, and keeps each link as ``[text](url)`` so the reader can still
follow it.  Composition then sends multipart/alternative, as for a row with
both bodies.  ``OUTBOX_MAILER_TEXT_ALTERNATIVE=false`` turns it off.

It costs about 0.3 ms for a 1 KB receipt (lxml parses the HTML), paid only
by HTML-only rows, in the daemon's event loop; deeply nested tables cost far
more (about 0.15 s for 64 KiB of them here), so HTML over :data:`MAX_HTML_BYTES`
goes out HTML-only: a document that long is a newsletter, not a receipt, and
its rendering would hold every other send.
"""

from __future__ import annotations

from functools import cache
from typing import Any

__all__ = ["MAX_HTML_BYTES", "text_from_html"]

MAX_HTML_BYTES = 64 * 1024  # UTF-8 bytes of HTML rendered at most


def text_from_html(html: str) -> str | None:
    """The text rendering of ``html``, or None when it holds no readable text.

    Never raises for bad HTML: the alternative is a courtesy to the reader, so a
    document the parser cannot read goes out HTML-only rather than not at all.
    """
    get_text, config = _renderer()
    try:
        text = get_text(html, config)
    except Exception:  # noqa: BLE001  (lxml's errors for unreadable documents: empty, only a comment, ...)
        return None
    text = "\n".join(line.rstrip() for line in text.strip("\n").splitlines())
    return text + "\n" if text.strip() else None


@cache
def _renderer() -> tuple[Any, Any]:
    """inscriptis and its configuration, imported at the first HTML-only row: with lxml they add about
    10 MB to a daemon's memory, which daemons that never see such a row need not pay."""
    from inscriptis import get_text
    from inscriptis.model.config import ParserConfig

    return get_text, ParserConfig(display_links=True, display_images=False)
