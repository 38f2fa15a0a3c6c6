"""The console's pages of stored templates (docs/templates.md): the list, and one template's versions, the
chosen version's sources and a preview with sample data.

A preview is a GET with the data in its ``data`` parameter: it changes nothing, and the rendered HTML is shown
like an email's, in ``<iframe sandbox="">`` from a URL of its own (``/templates/{name}/html?...``, served by
:func:`~outbox_mailer.console.content.html_preview` with the same Content-Security-Policy), which must
carry the data to render it again. So the data is capped at :data:`MAX_DATA_CHARS` characters, which
keeps the frame's URL within the HTTP server's request head. Every render runs through the daemon's own
path and limits: :func:`~outbox_mailer.templating.worker.render_isolated` in a worker process, under
``OUTBOX_MAILER_TEMPLATES__*`` and ``MAX_MESSAGE_BYTES``. What is wrong with the data or the render (not
JSON, not an object, an undefined variable, the sandbox's refusal, a limit) is a 400 naming it.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response

from ..errors import NotFound, TemplateError
from ..templating.render import Rendered, TemplateVersion
from ..templating.worker import render_isolated
from .auth import Session
from .content import html_preview
from .web import Console, Refused, path_segments, segment_value, template_url, with_query

MAX_DATA_CHARS = 4000  # the sample data's JSON; up to three times as long percent-encoded in the frame's URL
MAX_VERSIONS = 1000  # versions listed on a template's page
MAX_LOCALE_CHARS = 64


async def templates(request: Request, console: Console, session: Session) -> Response:
    return console.page(request, "templates.html", session, rows=await console.store.templates())


async def template(request: Request, console: Console, session: Session) -> Response:
    """``/templates/{name}``: the page; ``/templates/{name}/html``: the preview's HTML for its frame."""
    segments = path_segments(request, "/templates/")
    name = segment_value(request, segments, "name")
    frame = segments[1:] == ["html"]
    if not name or not (len(segments) == 1 or frame):
        raise Refused(404, "no such page")
    params = request.query_params
    chosen = await _chosen(console, name, params)
    text = params.get("data")
    if frame:
        if text is None:
            raise Refused(400, "data: the sample data to render, a JSON object")
        rendered = await _rendered(console, chosen, text)
        if rendered.html_body is None:
            raise Refused(404, f"{chosen.describe()} has no HTML body")
        return html_preview(rendered.html_body, remote=False)
    problem, rendered_or_none = None, None
    if text is not None:
        try:
            rendered_or_none = await _rendered(console, chosen, text)
        except Refused as exc:
            problem = exc.message
    versions = await console.store.template_versions(chosen.name, MAX_VERSIONS)
    locales: dict[str, list[dict[str, Any]]] = {}
    for row in versions:
        locales.setdefault(row["locale"], []).append(row)
    added = next((v for v in locales.get(chosen.locale, []) if v["version"] == chosen.version), None)
    pinned = [("locale", chosen.locale), ("version", str(chosen.version))]  # the version shown, in each URL
    action, _, dotted = template_url(chosen.name).partition("?")  # a GET form's action loses its query
    hidden = [*pinned, *([tuple(dotted.split("=", 1))] if dotted else [])]
    frame_url = with_query(template_url(chosen.name, "/html"), urlencode([*pinned, ("data", text or "")]))
    return console.page(request, "template.html", session, 400 if problem else 200, chosen=chosen, added=added,
                        locales=locales, data=text if text is not None else "{}", problem=problem,
                        rendered=rendered_or_none, max_data=MAX_DATA_CHARS, action=action, hidden=hidden,
                        frame_url=frame_url)


async def _chosen(console: Console, name: str, params: QueryParams) -> TemplateVersion:
    """The version the query asks for, picked as a row's INSERT would (the locale chain; the latest version)."""
    locale = params.get("locale") or None
    if locale is not None and len(locale) > MAX_LOCALE_CHARS:
        raise Refused(400, f"locale: at most {MAX_LOCALE_CHARS} characters")
    asked = params.get("version") or None
    if asked is not None and not (asked.isascii() and asked.isdigit() and 1 <= int(asked) <= 2**31 - 1):
        raise Refused(400, "version: a version number, 1 or more")
    try:
        return await console.store.template(name, locale, None if asked is None else int(asked))
    except NotFound as exc:
        raise Refused(404, str(exc)) from None


def sample_data(text: str) -> dict[str, Any]:
    """The preview's data: a JSON object of at most :data:`MAX_DATA_CHARS` characters, or 400 saying why not."""
    if len(text) > MAX_DATA_CHARS:
        raise Refused(400, f"data: at most {MAX_DATA_CHARS} characters (the preview's URL carries it)")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise Refused(400, f"data: not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise Refused(400, 'data: a JSON object, like {"name": "Ann"}')
    return data


async def _rendered(console: Console, version: TemplateVersion, text: str) -> Rendered:
    """``version`` rendered with the data ``text`` as the daemon renders a row (its worker, its limits)."""
    data = sample_data(text)
    try:
        return await render_isolated(version, data, console.render_limits)
    except TemplateError as exc:
        raise Refused(400, f"{exc.reason} ({version.describe()})") from None
