"""What the daemon does with internationalised addresses, special-use domains and HTML-only rows,
against a real SMTP server (aiosmtpd, with and without SMTPUTF8)."""

from __future__ import annotations

import email
import email.policy
from typing import Any

import pytest

from outbox_mailer.store import Store
from tests.integration.conftest import insert
from tests.smtp_server import SmtpTestServer, running_smtp_server

pytestmark = pytest.mark.anyio

INTRANET = ["ops@printer.local", "ops@nas.home.arpa", "ops@shop.example.test", "ops@dev.localhost"]


def parsed(data: bytes) -> email.message.EmailMessage:
    text = data.decode("utf-8").replace("\r\n", "\n")
    return email.message_from_string(text, policy=email.policy.default)  # type: ignore[return-value]


async def test_an_internationalised_address_goes_out_with_smtputf8_and_utf8_headers(
        running: Any, store: Store, smtp_server: SmtpTestServer) -> None:
    await insert(store, "eai", from_address="Zoë <zoë@example.com>", to_addresses=["Jörg <jörg@bücher.example>"],
                 subject="Grüße")
    rows = await (await running()).final("eai")
    assert rows["eai"]["status"] == "sent", rows["eai"]["last_error"]
    (message,) = smtp_server.accepted
    assert (message.mail_from, message.rcpt_tos) == ("zoë@example.com", ("jörg@xn--bcher-kva.example",))
    received = parsed(message.data)
    assert received["From"].addresses[0].username == "zoë"
    assert str(received["To"]) == "Jörg <jörg@xn--bcher-kva.example>"
    assert received["Subject"] == "Grüße"


async def test_without_smtputf8_at_the_server_the_row_fails_and_nothing_is_sent(
        running: Any, store: Store) -> None:
    with running_smtp_server(enable_SMTPUTF8=False) as ascii_only:
        await insert(store, "eai", to_addresses=["zoë@example.com"])
        await insert(store, "reply-to", to_addresses=["a@example.com"], reply_to="zoë@example.com")
        await insert(store, "plain", to_addresses=["zoe@example.com"])
        r = await running(smtp={"host": ascii_only.host, "port": ascii_only.port, "tls": "none"})
        rows = await r.final("eai", "reply-to", "plain")
        for key in ("eai", "reply-to"):  # a UTF-8 header needs SMTPUTF8 as much as a UTF-8 envelope does
            assert rows[key]["status"] == "failed"
            assert "does not offer SMTPUTF8" in rows[key]["last_error"]
        assert rows["plain"]["status"] == "sent"
        assert [m.rcpt_tos for m in ascii_only.messages] == [("zoe@example.com",)]


async def test_special_use_domains_are_refused_unless_the_setting_allows_them(
        running: Any, store: Store, smtp_server: SmtpTestServer) -> None:
    for i, address in enumerate(INTRANET):
        await insert(store, f"default-{i}", to_addresses=[address])
    r = await running()
    rows = await r.final(*(f"default-{i}" for i in range(len(INTRANET))))
    assert {row["status"] for row in rows.values()} == {"failed"}, rows
    assert all("special-use or reserved name" in row["last_error"] for row in rows.values())
    assert smtp_server.accepted == []


async def test_with_the_setting_intranet_domains_are_sent_but_never_invalid(
        running: Any, store: Store, smtp_server: SmtpTestServer) -> None:
    for i, address in enumerate(INTRANET):
        await insert(store, f"allowed-{i}", to_addresses=[address])
    await insert(store, "invalid", to_addresses=["ops@host.invalid"])
    r = await running(allow_special_use_domains=True, default_from="Shop <noreply@shop.example.test>")
    rows = await r.final("invalid", *(f"allowed-{i}" for i in range(len(INTRANET))))
    assert rows.pop("invalid")["status"] == "failed"
    assert {row["status"] for row in rows.values()} == {"sent"}, rows
    assert sorted(m.rcpt_tos[0] for m in smtp_server.accepted) == sorted(INTRANET)
    assert {m.mail_from for m in smtp_server.accepted} == {"noreply@shop.example.test"}


@pytest.mark.parametrize("alternative", [True, False])
async def test_an_html_only_row_gets_its_text_alternative_unless_turned_off(
        running: Any, store: Store, smtp_server: SmtpTestServer, alternative: bool) -> None:
    html = "<p>Your order has shipped: <a href='https://shop.example.com/t/1'>track it</a>.</p>"
    await insert(store, "html", text_body=None, html_body=html)
    rows = await (await running(text_alternative=alternative)).final("html")
    assert rows["html"]["status"] == "sent"
    received = parsed(smtp_server.accepted[0].data)
    if not alternative:
        assert received.get_content_type() == "text/html"
        return
    assert received.get_content_type() == "multipart/alternative"
    plain, rich = received.iter_parts()
    assert rich.get_content() == html + "\n"
    assert plain.get_content() == "Your order has shipped: [track it](https://shop.example.com/t/1).\n"


# -- suppressed internationalised addresses: the form is the envelope's (test_suppression_forms.py) --


async def test_a_suppressed_internationalised_address_gets_no_mail(
        running: Any, store: Store, smtp_server: SmtpTestServer, db_url: str) -> None:
    from outbox_mailer.delivery_events.suppression import normal_address
    from outbox_mailer.store import EventStore

    events = await EventStore.open(db_url)
    try:
        for address in ("ΟΔΟΣ@example.com", "zoë@example.com"):
            await events.suppress(normal_address(address), "hard_bounce", "test", None)
    finally:
        await events.close()
    await insert(store, "greek", to_addresses=["Οδός <ΟΔΟΣ@example.com>"])
    await insert(store, "zoe", to_addresses=["zoe\u0308@Example.COM"])  # decomposed ë, upper-case ASCII domain
    rows = await (await running()).final("greek", "zoe")
    assert {k: r["status"] for k, r in rows.items()} == {"greek": "failed", "zoe": "failed"}
    assert all(r["last_error"].startswith("suppressed: ") for r in rows.values())
    assert smtp_server.accepted == []
