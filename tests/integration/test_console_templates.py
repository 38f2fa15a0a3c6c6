"""Stored templates in the console over real HTTP against real PostgreSQL: the list, a template's versions and
sources (escaped), a preview with sample data rendered through the daemon's worker process and limits (its HTML
only in the email body's sandboxed frame), 400 naming what is wrong with the data or the render, 404 for an
unknown template or version, the sign-in asked of anonymous visitors, and the email page naming the template,
version and data a row used."""

from __future__ import annotations

import html
import json
import re
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote, urlencode

import pytest

from outbox_mailer.console.web import template_url
from tests.console_harness import Client, Served, served_console
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio

SCRIPT = "<script>alert(1)</script>"
ADD = """INSERT INTO email_templates (name, locale, version, subject, text_body, html_body, created_by)
         SELECT $1, $2, coalesce(max(version), 0) + 1, $3, $4, $5, $6 FROM email_templates
         WHERE name = $1 AND locale = $2"""


async def add(store: SqlStore, name: str, subject: str, text: str | None = "Hello {{ name }}",
              html_body: str | None = "<p>Hello {{ name }}</p>", *, locale: str = "en", by: str = "cli:ann") -> None:
    await store.execute(ADD, name, locale, subject, text, html_body, by)


@pytest.fixture
async def served(db_url: str) -> AsyncIterator[Served]:
    async with served_console(db_url, max_message_bytes=100_000) as served:
        yield served


@pytest.fixture
async def viewer(served: Served) -> AsyncIterator[Client]:
    client = served.client()
    assert (await client.login("victor")).status_code == 303
    yield client
    await client.aclose()


def preview_url(name: str, data: Any, suffix: str = "", **query: Any) -> str:
    text = data if isinstance(data, str) else json.dumps(data)
    url = template_url(name, suffix)
    return url + ("&" if "?" in url else "?") + urlencode({**query, "data": text})


def section(page: str, ident: str) -> str:
    """The text of the element with id ``ident`` up to the next section."""
    return page.split(f'id="{ident}"', 1)[1].split("</section>", 1)[0]


async def test_the_template_list_shows_each_name_with_its_locales_latest_version_and_author(
        viewer: Client, store: SqlStore) -> None:
    await add(store, "welcome", "Hi v1")
    await add(store, "welcome", "Hi v2", by="cli:bob")
    await add(store, "welcome", "Olá", locale="pt-BR", by="cli:carla")
    await add(store, "receipt/<b>", "Receipt")
    page = await viewer.get("/templates")
    assert page.status_code == 200
    rows = re.findall(r"<tr>(.*?)</tr>", page.text, re.S)
    cells = [[html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<td>(.*?)</td>", r, re.S)]
             for r in rows if "<td>" in r]
    assert [c[:4] for c in cells] == [["receipt/<b>", "en (default)", "1", "1"], ["welcome", "en (default)", "2", "2"],
                                      ["welcome", "pt-BR", "1", "1"]]
    assert [c[5] for c in cells] == ["cli:ann", "cli:bob", "cli:carla"]
    assert "receipt/<b>" not in page.text  # escaped
    assert f'href="{html.escape(template_url("receipt/<b>"))}?locale=en"' in page.text
    assert 'href="/templates"' in (await viewer.get("/")).text  # in the console's navigation


async def test_a_template_page_lists_its_versions_and_shows_the_chosen_versions_sources_as_text(
        viewer: Client, store: SqlStore) -> None:
    await add(store, "welcome", "Welcome v1", html_body=f"<p>v1</p>{SCRIPT}")
    await add(store, "welcome", "Welcome v2 {{ name }}")
    await add(store, "welcome", "Bem-vindo", locale="pt")
    latest = await viewer.get("/templates/welcome")
    assert latest.status_code == 200
    assert "Welcome v2 {{ name }}" in section(latest.text, "sources")
    versions = section(latest.text, "versions")
    assert "?locale=en&amp;version=1" in versions and "?locale=en&amp;version=2" in versions
    assert "?locale=pt" in latest.text  # the other locale
    first = (await viewer.get("/templates/welcome?locale=en&version=1")).text
    assert "Welcome v1" in section(first, "sources")
    assert SCRIPT not in first and html.escape(SCRIPT, quote=False) in first  # the source shown as text
    assert "Bem-vindo" in (await viewer.get("/templates/welcome?locale=pt-BR")).text  # the INSERT's locale chain
    for name in ("a/b", "..", "~", "two words"):
        await add(store, name, f"subject of {name}")
        page = await viewer.get(template_url(name))
        assert page.status_code == 200 and html.escape(f"subject of {name}") in page.text, name


async def test_a_preview_escapes_the_data_in_the_text_and_shows_the_html_only_in_the_sandboxed_frame(
        viewer: Client, store: SqlStore) -> None:
    await add(store, "welcome", "Hi {{ name }}", text="Dear {{ name }}", html_body="<p class=x>Dear {{ name }}</p>")
    data = {"name": SCRIPT}
    page = await viewer.get(preview_url("welcome", data))
    assert page.status_code == 200
    preview = section(page.text, "preview")
    assert SCRIPT not in page.text
    assert f"Dear {html.escape(SCRIPT, quote=False)}" in preview and f"Hi {html.escape(SCRIPT, quote=False)}" in preview
    assert re.findall(r"<script[^>]*>", page.text) == []  # no script at all on the page
    frame = re.search(r'<iframe class="html" sandbox="" [^>]*src="([^"]+)"', preview)
    assert frame is not None and "<p class=x>" not in page.text  # the rendered HTML only in the frame
    body = await viewer.get(html.unescape(frame.group(1)))
    assert body.status_code == 200 and body.headers["content-type"].startswith("text/html")
    assert body.text == "<p class=x>Dear &lt;script&gt;alert(1)&lt;/script&gt;</p>"  # autoescaped by the renderer
    email_frame_csp = "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:; font-src data:;"
    assert body.headers["content-security-policy"].startswith(email_frame_csp)


async def test_an_undefined_variable_is_a_400_that_names_it(viewer: Client, store: SqlStore) -> None:
    await add(store, "welcome", "Hi {{ first_name }}")
    page = await viewer.get(preview_url("welcome", {"name": "Ann"}))
    assert page.status_code == 400
    assert "first_name" in page.text and "undefined" in page.text
    assert "Hi {{ first_name }}" in page.text  # the page with its sources, to correct the data
    assert (await viewer.get(preview_url("welcome", {"name": "Ann"}, "/html"))).status_code == 400


@pytest.mark.parametrize(("data", "named"), [
    ("{not json", "not JSON"),
    ("[1, 2]", "a JSON object"),
    ('{"n": 20000}', "MAX_MESSAGE_BYTES"),  # the console's limit: max_message_bytes=100000
    ("{" + '"x": 1,' * 600 + "}", "at most"),  # too long for a URL
])
async def test_data_that_is_not_a_json_object_or_a_render_over_a_limit_is_a_400(
        viewer: Client, store: SqlStore, data: str, named: str) -> None:
    await add(store, "big", "Hi", text="{% for i in range(n|default(1)) %}xxxxxxxxxx{% endfor %}", html_body=None)
    page = await viewer.get(preview_url("big", data))
    assert page.status_code == 400, page.text
    assert named in html.unescape(page.text)


async def test_a_sandbox_escape_in_a_stored_template_is_refused_with_a_400(viewer: Client, store: SqlStore) -> None:
    await add(store, "evil", "{{ ''.__class__.__mro__[1].__subclasses__() }}")
    await add(store, "evil2", "ok", text=None, html_body="{{ name.__init__.__globals__ }}")
    page = await viewer.get(preview_url("evil", {}))
    assert page.status_code == 400 and "sandbox" in page.text and "__subclasses__" not in section(page.text, "problem")
    frame = await viewer.get(preview_url("evil2", {"name": "x"}, "/html"))
    assert frame.status_code == 400 and "sandbox" in frame.text


async def test_an_unknown_template_or_version_is_a_404(viewer: Client, store: SqlStore) -> None:
    await add(store, "welcome", "Hi")
    assert (await viewer.get("/templates/welcom")).status_code == 404
    assert (await viewer.get("/templates/welcome?version=2")).status_code == 404
    assert (await viewer.get("/templates/welcome?version=x")).status_code == 400
    assert (await viewer.get(preview_url("welcom", {}, "/html"))).status_code == 404
    assert (await viewer.get("/templates/welcome/other")).status_code == 404


async def test_an_anonymous_visitor_is_sent_to_the_sign_in_page(served: Served, store: SqlStore) -> None:
    await add(store, "welcome", "Hi")
    anonymous = served.client()
    for url in ("/templates", "/templates/welcome", preview_url("welcome", {}), preview_url("welcome", {}, "/html")):
        response = await anonymous.get(url)
        assert (response.status_code, response.headers.get("location")) == (303, "/login"), url
    await anonymous.aclose()


async def test_the_email_page_shows_the_template_version_and_data_a_row_used(
        viewer: Client, store: SqlStore) -> None:
    await add(store, "welcome", "Hi {{ name }}")
    await add(store, "welcome", "Olá {{ name }}", locale="pt")
    await store.execute("INSERT INTO email_deliveries (dedupe_key, to_addresses, template, template_data, locale) "
                        "VALUES ('t1', ARRAY['ann@example.com'], 'welcome', $1::jsonb, 'pt-BR')",
                        {"name": SCRIPT, "items": [1, 2]})
    page = await viewer.get("/emails/t1")
    assert page.status_code == 200
    used = section(page.text, "template")
    assert "welcome" in used and "pt" in used and ">1<" in used
    assert 'href="/templates/welcome?locale=pt&amp;version=1"' in used
    assert SCRIPT not in page.text and html.escape(SCRIPT) in used and "items" in used
    await store.execute("UPDATE email_deliveries SET status = 'sent', sent_at = now() WHERE dedupe_key = 't1'")
    await store.execute("UPDATE email_deliveries SET template_data = '{}', scrubbed_at = now() WHERE dedupe_key = 't1'")
    scrubbed = section((await viewer.get("/emails/t1")).text, "template")
    assert "removed by retention" in scrubbed and "items" not in scrubbed


async def test_a_template_name_in_a_link_is_one_path_segment() -> None:
    assert template_url("a/b?c") == "/templates/" + quote("a/b?c", safe="")
    assert template_url("..") == "/templates/~?name=.."
