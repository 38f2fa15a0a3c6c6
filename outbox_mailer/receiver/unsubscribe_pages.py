"""``/unsubscribe/{token}``: one-click unsubscribe (RFC 8058) served by the receiver.

``POST`` with the body ``List-Unsubscribe=One-Click`` (``application/x-www-form-urlencoded`` or
``multipart/form-data``, at most :data:`MAX_FORM_BYTES`) records a suppression of the token's address for
the token's category only (reason ``unsubscribe``, source ``one-click``) and answers 200 with a short page.
The mailbox provider sends no cookie, no CSRF token and no Origin of ours, so none is asked for: the signed
token (delivery_events/unsubscribe.py) is the whole authentication. ``GET`` shows a page whose button makes
that POST, and changes nothing (a link scanner's GET must not unsubscribe anyone).

Answers: 404 for a token that does not verify (forged, altered, signed by a key no longer listed, older than
``VALIDITY_DAYS``, or unsubscribe not configured), checked before the body is read; 400 for a POST without the
one-click field; 413 over the bound; 503 when the database is unreachable (the provider may try again). A valid
token used again answers 200 and writes nothing: the suppression exists once. Pages are sent with
``Referrer-Policy: no-referrer`` (the token is in the URL) and are never cached.
"""

from __future__ import annotations

import html
import logging
from typing import Any

from starlette.datastructures import FormData
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.types import Message

from ..delivery_events.model import TooLarge
from ..delivery_events.unsubscribe import ONE_CLICK, day_of
from ..errors import DatabaseError
from .bodies import read_body

log = logging.getLogger("outbox_mailer")
MAX_FORM_BYTES = 4096  # the one-click body is 26 bytes; a multipart form of it a few hundred
PAGE_HEADERS = {"referrer-policy": "no-referrer", "cache-control": "no-store", "x-frame-options": "DENY",
                "content-security-policy": "default-src 'none'; form-action 'self'; style-src 'unsafe-inline'"}
_FIELD, _VALUE = ONE_CLICK.split("=")


def _page(title: str, text: str, status: int = 200, form: bool = False) -> HTMLResponse:
    button = (f'<form method="post"><input type="hidden" name="{_FIELD}" value="{_VALUE}">'
              '<button type="submit">Unsubscribe</button></form>') if form else ""
    body = (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            '<meta name="viewport" content="width=device-width, initial-scale=1"></head>'
            f"<body><h1>{html.escape(title)}</h1><p>{html.escape(text)}</p>{button}</body></html>\n")
    return HTMLResponse(body, status_code=status, headers=PAGE_HEADERS)


async def _form(request: Request, body: bytes) -> FormData:
    """The body parsed as the form its content type says (Starlette's parsers, over the body already read)."""
    async def replay() -> Message:
        return {"type": "http.request", "body": body, "more_body": False}

    return await Request(request.scope, replay).form(max_files=0, max_fields=8, max_part_size=MAX_FORM_BYTES)


async def unsubscribe(request: Request) -> Response:
    receiver: Any = request.app.state.receiver
    keys = receiver.unsubscribe
    found = keys.read(request.path_params["token"], day_of(receiver.clock())) if keys is not None else None
    if found is None:
        receiver.refused.labels("unsubscribe", "404").inc()
        return _page("Unknown link", "This unsubscribe link is not valid, or has expired.", 404)
    topic = f"the emails of the category {found.category!r}"
    if request.method != "POST":
        return _page("Unsubscribe", f"Stop receiving {topic} at this address?", form=True)
    try:
        form = await _form(request, await read_body(request, MAX_FORM_BYTES))
    except TooLarge:
        receiver.refused.labels("unsubscribe", "413").inc()
        return _page("Too large", "The request is larger than an unsubscribe can be.", 413)
    except MultiPartException:
        form = FormData()
    if form.get(_FIELD) != _VALUE:
        receiver.refused.labels("unsubscribe", "400").inc()
        return _page("Not an unsubscribe", f"Expected the form field {ONE_CLICK}.", 400)
    try:
        new = await receiver.store.unsubscribe(found.address, found.category, found.delivery_id)
    except DatabaseError as exc:
        receiver.unavailable.labels("unsubscribe").inc()
        log.warning("unsubscribe answered 503: database unavailable: %s", exc)
        return Response("unavailable, retry later\n", status_code=503, headers={"retry-after": "30"})
    receiver.unsubscribes.labels("new" if new else "repeated").inc()
    if new:
        log.info("unsubscribed row=%d category=%s", found.delivery_id, found.category)
    return _page("Unsubscribed", f"This address will no longer receive {topic}.")
