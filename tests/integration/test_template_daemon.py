"""Rows that name a stored template, through the whole daemon and a real SMTP server: the version recorded at
INSERT is rendered, the same on a retry and after a rescue whatever is added meanwhile; a render that fails
fails the row permanently without a connection; the HTML body escapes the data and the text does not."""

from __future__ import annotations

import email
import email.policy
import re
from email.message import EmailMessage
from typing import Any

import anyio
import pytest

from outbox_mailer.store import Store
from tests.smtp_server import SmtpTestServer
from tests.spamassassin import require_spamassassin, score_all

pytestmark = pytest.mark.anyio

ADD = """INSERT INTO email_templates (name, locale, version, subject, text_body, html_body, created_by)
         SELECT $1, $2, coalesce(max(version), 0) + 1, $3, $4, $5, 'test' FROM email_templates
         WHERE name = $1 AND locale = $2"""


async def add(store: Store, name: str, subject: str, text: str | None, html: str | None = None,
              locale: str = "en") -> None:
    await store.execute(ADD, name, locale, subject, text, html)


async def named(store: Store, key: str, template: str, data: dict[str, Any], locale: str | None = None) -> None:
    await store.execute("INSERT INTO email_deliveries (dedupe_key, to_addresses, template, template_data, locale) "
                        "VALUES ($1, ARRAY['ann@example.com'], $2, $3::jsonb, $4)", key, template, data, locale)


def parsed(data: bytes) -> EmailMessage:
    message = email.message_from_bytes(data, policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    return message


def undated(data: bytes) -> bytes:
    """The message as sent less its Date line, which is the attempt's own."""
    return re.sub(rb"(?m)^Date: [^\r]*\r\n", b"", data)


async def test_a_template_row_is_rendered_with_its_data_escaped_in_html_and_raw_in_text(
        running: Any, store: Store, smtp_server: SmtpTestServer) -> None:
    await add(store, "welcome", "Welcome, {{ name }}", "Hello {{ name }}!", "<p>Hello {{ name }}!</p>")
    await named(store, "w1", "welcome", {"name": "<script>x</script>"})
    rows = await (await running()).final("w1")
    assert rows["w1"]["status"] == "sent", rows["w1"]["last_error"]
    [m] = smtp_server.accepted
    message = parsed(m.data)
    assert message["Subject"] == "Welcome, <script>x</script>"
    text, html = message.get_body(("plain",)), message.get_body(("html",))
    assert text is not None and html is not None
    assert text.get_content().strip() == "Hello <script>x</script>!"
    assert html.get_content().strip() == "<p>Hello &lt;script&gt;x&lt;/script&gt;!</p>"


async def test_an_html_only_template_gets_its_text_alternative(
        running: Any, store: Store, smtp_server: SmtpTestServer) -> None:
    await add(store, "news", "News", None, "<h1>Hi {{ name }}</h1><p>Read on.</p>")
    await named(store, "n1", "news", {"name": "Bo"})
    rows = await (await running()).final("n1")
    assert rows["n1"]["status"] == "sent"
    text = parsed(smtp_server.accepted[0].data).get_body(("plain",))
    assert text is not None and "Hi Bo" in text.get_content()


@pytest.mark.parametrize(("template", "data", "error"), [
    ("Hello {{ first_name }}", {"name": "Ann"}, "undefined variable: 'first_name' is undefined"),
    ("{{ ''.__class__.__mro__ }}", {}, "refused by the sandbox"),
    ("{{ 'x' * 500000000 }}", {}, "refused by the sandbox"),
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", {},
     "render exceeded 0.5 s"),
])
async def test_a_render_that_fails_fails_the_row_permanently_without_a_connection(
        running: Any, store: Store, smtp_server: SmtpTestServer, template: str, data: dict[str, Any],
        error: str) -> None:
    await add(store, "broken", "Hi", template)
    await named(store, "b1", "broken", data)
    rows = await (await running(templates={"render_timeout_seconds": 0.5})).final("b1", timeout=20)
    assert rows["b1"]["status"] == "failed"
    assert error in rows["b1"]["last_error"] and "broken (en, version 1)" in rows["b1"]["last_error"]
    assert smtp_server.connections == 0


async def test_a_subject_with_a_newline_from_the_data_is_refused(
        running: Any, store: Store, smtp_server: SmtpTestServer) -> None:
    await add(store, "greet", "Hi {{ name }}", "body")
    await named(store, "g1", "greet", {"name": "Ann\r\nBcc: evil@example.net"})
    rows = await (await running()).final("g1")
    assert rows["g1"]["status"] == "failed"
    assert rows["g1"]["last_error"].startswith("cannot compose: subject: control character '\\r'")
    assert smtp_server.connections == 0


async def test_a_retry_renders_the_version_pinned_at_insert_to_the_same_bytes(
        running: Any, store: Store, smtp_server: SmtpTestServer) -> None:
    await add(store, "receipt", "Receipt {{ n }}", "Version one: {{ n }}", "<p>Version one: {{ n }}</p>")
    await named(store, "r1", "receipt", {"n": 42})
    await add(store, "receipt", "Receipt {{ n }} (new)", "Version two: {{ n }}", "<p>Version two</p>")
    smtp_server.fail("DATA", "451 4.3.0 try later", times=1)
    rows = await (await running()).final("r1")
    assert rows["r1"]["status"] == "sent" and rows["r1"]["attempts"] == 2
    first, second = (m.data for m in smtp_server.messages)
    assert undated(first) == undated(second)
    assert parsed(second)["Subject"] == "Receipt 42" and b"Version one: 42" in second


async def test_a_rescued_row_renders_the_version_pinned_at_insert_to_the_same_bytes(
        running: Any, store: Store, smtp_server: SmtpTestServer) -> None:
    await add(store, "receipt", "Receipt {{ n }}", "Version one: {{ n }}")
    await named(store, "s1", "receipt", {"n": 7})
    smtp_server.delay("DATA", 1.5)
    first = await running(shutdown_grace_seconds=0.2)
    with anyio.fail_after(10):  # the body is read; its reply waits
        while not smtp_server.messages:
            await anyio.sleep(0.05)
    first.daemon.stop()  # the send cut off after the body went out: the row stays 'sending'
    await first.wait_for(lambda rows: rows["s1"]["status"] == "sending" and not first.daemon.in_flight, ["s1"])
    await add(store, "receipt", "Receipt {{ n }} (new)", "Version two: {{ n }}")
    smtp_server.clear_faults()
    await store.execute("UPDATE email_deliveries SET claimed_at = now() - interval '1 hour'")
    rows = await (await running(rescue_interval_seconds=0.1)).final("s1")
    assert rows["s1"]["status"] == "sent"
    cut_off, resent = (m.data for m in smtp_server.messages)
    assert undated(cut_off) == undated(resent) and b"Version one: 7" in resent


async def test_spamassassin_scores_a_rendered_template_row_as_it_scores_the_same_plain_row(
        running: Any, store: Store, smtp_server: SmtpTestServer) -> None:
    require_spamassassin()
    text = "Hello Ana,\n\nyour order 1042 has shipped. It should arrive on Thursday.\n\nThe shop team\n"
    html = "<p>Hello Ana,</p><p>your order 1042 has shipped. It should arrive on Thursday.</p><p>The shop team</p>"
    await add(store, "shipped", "Your order {{ order }} has shipped", text.replace("1042", "{{ order }}"),
              html.replace("1042", "{{ order }}"))
    await named(store, "rendered", "shipped", {"order": 1042})
    await store.execute("INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, html_body) "
                        "VALUES ('plain', ARRAY['ann@example.com'], 'Your order 1042 has shipped', $1, $2)",
                        text, html)
    rows = await (await running()).final("rendered", "plain")
    assert {r["status"] for r in rows.values()} == {"sent"}
    messages = {parsed(m.data)["Message-ID"]: m.data for m in smtp_server.accepted}
    ids = {r["dedupe_key"]: r["message_id"] for r in await store.fetch(
        "SELECT dedupe_key, message_id FROM email_deliveries")}
    verdicts = score_all({key: messages[ids[key]] for key in ("rendered", "plain")})
    assert verdicts["rendered"].score == verdicts["plain"].score, verdicts
    assert verdicts["rendered"].rules == verdicts["plain"].rules
