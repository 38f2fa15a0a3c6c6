"""Every kind of message the project composes, sent by the daemon through Debian's real Postfix
(issue 17, item 7).

One private Postfix (tests/postfix.py: STARTTLS with a throwaway CA, PIPELINING, SIZE 200000,
SMTPUTF8, virtual Maildirs) serves the whole module; one daemon (built as ``run`` builds it:
daemon/transport_factory.py) sends the plain rows over STARTTLS trusting the CA file, a second one with
``OUTBOX_MAILER_DKIM__*`` set sends the signed row. Each delivered copy is read back from the
Maildir with the standard library and compared with its row (addresses, subject, Message-ID,
bodies, attachment bytes, the queue id in ``provider_message_id``), and scored with SpamAssassin
(tests/spamassassin.py), which must stay below 1.0 with no rule about malformed headers or MIME
structure firing. The refusals are Postfix's own: 552 5.3.4 over SIZE, 550 5.1.1 for an unknown
user, and one unknown among two recipients (docs/lifecycle.md, "Partial deliveries": the row is
``sent`` with the refused one in ``refused_recipients``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import random
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from email import policy
from email.message import EmailMessage
from email.parser import Parser
from typing import Any

import anyio
import dkim
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from outbox_mailer.daemon.service import Daemon
from outbox_mailer.daemon.transport_factory import build_transports
from outbox_mailer.settings.config import Settings
from tests.conftest import cloned_database
from tests.e2e.chaos import Figures
from tests.in_process_daemon import Running, settings_for
from tests.integration.conftest import insert
from tests.postfix import USERS, PostfixServer, postfix_server
from tests.spamassassin import Verdict, score_all
from tests.sql_store import SqlStore

DOMAIN, SELECTOR = "example.com", "mail2026"
PDF = b"%PDF-1.4\n" + bytes(random.Random(17).randrange(256) for _ in range(6000)) + b"\n%%EOF\n"
CSV = "name,city\nZoë,Zürich\nJürgen,Köln\n".encode()
HTML = ('<html><body><h1>Weekly summary</h1><p>You had <b>3</b> new orders this week.</p>'
        '<p><a href="https://example.com/orders">See your orders</a></p></body></html>')


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# dedupe key -> columns; the daemon without DKIM sends these
PLAIN: dict[str, dict[str, Any]] = {
    "text": {"to_addresses": ["Alice Example <alice@example.com>"], "cc_addresses": ["carol@example.com"],
             "bcc_addresses": ["bob@example.com"], "reply_to": "Support <support@example.com>",
             "subject": "Your receipt for order 1042",
             "text_body": "Thank you for your order.\n\nOrder 1042: 2 items, shipped today.\n"},
    "html": {"to_addresses": ["bob@example.com"], "subject": "Your weekly summary", "text_body": None,
             "html_body": HTML},
    "text-html": {"to_addresses": ["carol@example.com"], "subject": "Your account was updated",
                  "text_body": "Your e-mail address was changed.\nIf this was not you, reply to this message.\n",
                  "html_body": "<p>Your e-mail address was changed.</p><p>If this was not you, reply to this "
                               "message.</p>"},
    "attachments": {"to_addresses": ["alice@example.com"], "subject": "Invoice 1042",
                    "text_body": "Your invoice and the delivery list are attached.\n",
                    "html_body": "<p>Your invoice and the delivery list are attached.</p>",
                    "attachments": [{"filename": "invoice-1042.pdf", "content_type": "application/pdf",
                                     "content_base64": b64(PDF)},
                                    {"filename": "Lieferliste für Zoë.csv", "content_type": "text/csv",
                                     "content_base64": b64(CSV)}]},
    "unicode": {"from_address": "Zoë Ünïcødé Team <app@example.com>", "to_addresses": ["Jürgen Groß <bob@example.com>"],
                "cc_addresses": ["“Ça va” Ops <carol@example.com>"],
                "subject": "Grüße aus Zürich — ☃ 日本語のお知らせ 🎉",
                "text_body": "Grüße, Jürgen! Das Paket ist unterwegs. ✓\n日本語のテキストも届きます。🎉\n"},
    "idn-local": {"to_addresses": ["Zoë Martin <zoë@example.com>"], "subject": "Für Zoë: deine Bestellung",
                  "text_body": "Hallo Zoë, deine Bestellung ist angekommen.\n"},
    "special-use": {"to_addresses": ["ops@mail.example.test"], "subject": "Nightly report",
                    "text_body": "The nightly export finished in 42 seconds.\n"},
    "partial": {"to_addresses": ["alice@example.com", "nobody@example.com"], "subject": "Team meeting notes",
                "text_body": "The notes of today's meeting are in the wiki.\n"},
    "unknown": {"to_addresses": ["nobody@example.com"], "subject": "Welcome", "text_body": "Welcome aboard.\n"},
    "too-big": {"to_addresses": ["alice@example.com"], "subject": "Photos", "text_body": "The photos.\n",
                "attachments": [{"filename": "photos.bin", "content_type": "application/octet-stream",
                                 "content_base64": b64(random.Random(7).randbytes(300_000))}]},
}
# sent by the DKIM-signing daemon
SIGNED: dict[str, dict[str, Any]] = {
    "dkim": {"to_addresses": ["Carol <carol@example.com>"], "subject": "Your password was changed",
             "text_body": "Your password was changed a minute ago.\n",
             "html_body": "<p>Your password was changed a minute ago.</p>"},
}
ROWS = {**PLAIN, **SIGNED}
REFUSED = {"partial": ["nobody@example.com"]}
DELIVERED = [key for key in ROWS if key not in ("unknown", "too-big")]

# Rules about how a message is built rather than what it says: missing or malformed headers
# (MISSING_*, INVALID_*, *MALF*, TO_MALFORMED, FROM_ADDR_WS, FROM_WSP_TRAIL, FROM_UNBAL*,
# HEADER_COUNT_*, SUBJECT_NEEDS_ENCODING, BAD_ENC_HEADER, FROM_EXCESS_BASE64, TVD_SPACE_ENCODED),
# bad Message-IDs and dates (MSGID_*, DATE_IN_*), MIME structure and encodings (MIME_*, MIMEPART_*,
# BOGUS_MIME_*, CTE_8BIT_*, BASE64_LENGTH_*, NONEXISTENT_CHARSET, *CHARSET_FARAWAY*, HTML_MIME_NO_HTML_TAG,
# HTML_MISSING_CTYPE, T_TVD_MIME_*), text and HTML alternatives that disagree (MPART_ALT_DIFF*), a
# broken DKIM signature (DKIM_INVALID) and a Received line SpamAssassin cannot parse (UNPARSEABLE_RELAY).
STRUCTURAL = re.compile(
    r"^(MISSING_|INVALID_|TO_MALFORMED|FROM_ADDR_WS|FROM_WSP_TRAIL|FROM_UNBAL|HEADER_COUNT_|SUBJECT_NEEDS_ENC"
    r"|BAD_ENC_|FROM_EXCESS_BASE64|TVD_SPACE_ENCODED|MSGID_|DATE_IN_|MIME_|MIMEPART_|BOGUS_MIME|CTE_8BIT"
    r"|BASE64_LENGTH_|NONEXISTENT_CHARSET|HTML_MIME_NO_HTML_TAG|HTML_MISSING_CTYPE|T_TVD_MIME|MPART_ALT_DIFF"
    r"|DKIM_INVALID|UNPARSEABLE_RELAY)|MALF|CHARSET_FARAWAY")


@dataclass
class Run:
    rows: dict[str, dict[str, Any]]
    attempts: dict[str, list[dict[str, Any]]]
    mail: dict[str, dict[str, list[bytes]]]  # Message-ID -> mailbox -> raw copies
    key: rsa.RSAPrivateKey
    postfix: PostfixServer

    def copies(self, key: str) -> dict[str, list[bytes]]:
        return self.mail.get(self.rows[key]["message_id"], {})

    def copy(self, key: str) -> bytes:
        copies = self.copies(key)
        assert copies, f"{key}: nothing delivered ({self.rows[key]['status']}, {self.rows[key]['last_error']})"
        return next(iter(copies.values()))[0]


def header_mailboxes(value: object) -> list[tuple[str, str]]:
    """(display name, address) of each mailbox in an address header's value."""
    return [(a.display_name, a.addr_spec) for a in policy.default.header_factory("To", str(value)).addresses]


def listed(values: list[str]) -> list[tuple[str, str]]:
    return [m for value in values for m in header_mailboxes(value)]


def envelope(cols: dict[str, Any]) -> set[str]:
    return {spec for _, spec in listed([*cols["to_addresses"], *cols.get("cc_addresses", []),
                                        *cols.get("bcc_addresses", [])])}


def expected_mailboxes(key: str) -> set[str]:
    return (envelope(ROWS[key]) & set(USERS)) - set(REFUSED.get(key, []))


def parse(data: bytes) -> EmailMessage:
    """A delivered copy as the standard library reads it (decoded first: its headers may be UTF-8, RFC 6532)."""
    return Parser(policy=policy.default).parsestr(data.decode("utf-8"))  # type: ignore[return-value]


def settings(url: str, pf: PostfixServer, **extra: Any) -> Settings:
    smtp = {"host": pf.host, "port": pf.port, "tls": "starttls", "ca_file": pf.ca_file,
            "connect_timeout_seconds": 5, "command_timeout_seconds": 5, "data_timeout_seconds": 10}
    return settings_for(url, pf, smtp=smtp, allow_special_use_domains=True, **extra)  # type: ignore[arg-type]


async def deliver(config: Settings, store: SqlStore, rows: dict[str, dict[str, Any]]) -> None:
    """Insert ``rows``, run a daemon until each is final (or 30 s passed), stop it."""
    for key, cols in rows.items():
        await insert(store, key, **cols)
    transports = build_transports(config)
    daemon = Daemon(config, transports)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            with contextlib.suppress(TimeoutError):  # a row left unsettled fails its own test
                await Running(daemon, store).final(*rows, timeout=30)
            daemon.stop()
    finally:
        for transport in transports.values():
            await transport.aclose()


async def deliver_all(url: str, pf: PostfixServer, key: rsa.RSAPrivateKey) -> tuple[dict, dict]:
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    store = await SqlStore.open(url)
    try:
        await deliver(settings(url, pf), store, PLAIN)
        await deliver(settings(url, pf, dkim={"domain": DOMAIN, "selector": SELECTOR, "private_key": pem}),
                      store, SIGNED)
        rows = {r["dedupe_key"]: r for r in await store.fetch("SELECT * FROM email_deliveries")}
        attempts = {k: await store.attempts(r["id"]) for k, r in rows.items()}
    finally:
        await store.close()
    return rows, attempts


def delivered_mail(pf: PostfixServer, rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, list[bytes]]]:
    """Every Maildir copy by Message-ID, once Postfix has delivered what the sent rows expect (or 15 s)."""
    expected = sum(len(expected_mailboxes(k)) for k, r in rows.items() if r["status"] == "sent")
    deadline = time.monotonic() + 15
    while sum(len(pf.messages(a)) for a in USERS) < expected and time.monotonic() < deadline:
        time.sleep(0.05)
    mail: dict[str, dict[str, list[bytes]]] = {}
    for address in USERS:
        for data in pf.messages(address):
            mail.setdefault(parse(data)["Message-ID"], {}).setdefault(address, []).append(data)
    return mail


@pytest.fixture(scope="module")
def run(pg_server: str, template_db: str) -> Iterator[Run]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with postfix_server() as pf, cloned_database(pg_server, template_db) as url:
        rows, attempts = anyio.run(deliver_all, url, pf, key)
        yield Run(rows, attempts, delivered_mail(pf, rows), key, pf)


@pytest.fixture(scope="module")
def verdicts(run: Run) -> dict[str, Verdict]:
    """SpamAssassin's verdict on one delivered copy of each kind, two scored at a time."""
    return score_all({k: run.copy(k) for k in DELIVERED if run.copies(k)})


def received_by_postfix(msg: EmailMessage) -> tuple[str, str]:
    """(protocol, queue id) of the Received line our Postfix added: ESMTPS = ESMTP over TLS."""
    top = " ".join(str(msg.get_all("Received")[0]).split())
    match = re.search(r"by mx\.example\.net \(Postfix\) with (\S+) id (\w+)", top)
    assert match and "(using TLS" in top, top
    return match[1], match[2]


def assert_sent(run: Run, key: str) -> dict[str, Any]:
    row = run.rows[key]
    assert row["status"] == "sent", (key, row["status"], row["last_error"], run.attempts[key])
    return row


@pytest.mark.parametrize("key", DELIVERED)
def test_each_delivered_copy_matches_its_row(run: Run, key: str) -> None:
    row = assert_sent(run, key)
    copies = run.copies(key)
    assert set(copies) == expected_mailboxes(key), (key, sorted(copies))
    assert all(len(c) == 1 for c in copies.values()), f"{key}: delivered more than once"
    for data in (c[0] for c in copies.values()):
        msg = parse(data)
        assert header_mailboxes(msg["From"]) == header_mailboxes(row["from_address"] or "App <app@example.com>")
        assert header_mailboxes(msg["To"]) == listed(row["to_addresses"])
        assert header_mailboxes(msg.get("Cc", "")) == listed(row["cc_addresses"])
        assert header_mailboxes(msg.get("Reply-To", "")) == header_mailboxes(row["reply_to"] or "")
        assert msg["Bcc"] is None  # and To/Cc above are exactly the row's: the Bcc recipient is in no header
        assert msg["Subject"] == row["subject"]
        assert msg["Message-ID"] == row["message_id"]
        protocol, queue_id = received_by_postfix(msg)
        assert protocol == ("UTF8SMTPS" if key == "idn-local" else "ESMTPS")
        assert row["provider_message_id"] == queue_id == run.postfix.queue_id_for(row["message_id"])
        text, html = msg.get_body(("plain",)), msg.get_body(("html",))
        if row["text_body"] is not None:
            assert text is not None and lf(text.get_content()) == lf(row["text_body"])
        if row["html_body"] is not None:
            assert html is not None and lf(html.get_content()) == lf(row["html_body"])


def lf(text: str) -> str:
    return text.replace("\r\n", "\n").rstrip("\n")


def test_message_ids_are_distinct_per_row(run: Run) -> None:
    ids = [run.rows[k]["message_id"] for k in ROWS]
    assert all(ids) and len(set(ids)) == len(ids), ids
    assert set(run.mail) == {run.rows[k]["message_id"] for k in DELIVERED if run.rows[k]["status"] == "sent"}


@pytest.mark.parametrize("key", DELIVERED)
def test_the_sent_attempt_names_the_queue_id_and_keeps_the_whole_reply(run: Run, key: str) -> None:
    row = assert_sent(run, key)
    attempt = run.attempts[key][-1]
    queue_id = row["provider_message_id"]
    assert re.fullmatch(r"[0-9A-Z]{8,12}", queue_id or ""), queue_id  # the queue id alone, no "Ok: queued as"
    assert (attempt["outcome"], attempt["reply_code"], attempt["enhanced_code"], attempt["provider_message_id"]) \
        == ("sent", 250, "2.0.0", queue_id)
    assert attempt["reply"] == f"250 2.0.0 Ok: queued as {queue_id}"


def test_html_only_gets_a_generated_text_alternative(run: Run) -> None:
    msg = parse(run.copy("html"))
    assert msg.get_content_type() == "multipart/alternative"
    assert [p.get_content_type() for p in msg.iter_parts()] == ["text/plain", "text/html"]
    text = msg.get_body(("plain",)).get_content()  # type: ignore[union-attr]
    assert "<" not in text and "Weekly summary" in text and "3 new orders this week" in " ".join(text.split())
    assert "https://example.com/orders" in text  # the link target survives the rendering


def test_attachments_arrive_byte_for_byte(run: Run) -> None:
    msg = parse(run.copy("attachments"))
    got = [(a.get_filename(), a.get_content_type(), a.get_payload(decode=True)) for a in msg.iter_attachments()]
    assert got == [(a["filename"], a["content_type"], base64.b64decode(a["content_base64"]))
                   for a in ROWS["attachments"]["attachments"]]


def test_an_internationalised_address_goes_out_with_smtputf8_and_utf8_headers(run: Run) -> None:
    data = run.copy("idn-local")
    assert run.copies("idn-local").keys() == {"zoë@example.com"}
    [to] = re.findall(rb"^To: .*$", data.partition(b"\n\n")[0], re.MULTILINE)
    assert to.endswith(" <zoë@example.com>".encode()), to  # RFC 6532: the addr-spec in raw UTF-8 (the
    assert parse(data)["To"].addresses[0].display_name == "Zoë Martin"  # name may be an RFC 2047 word)
    assert "Delivered-To: zoë@example.com".encode() in data  # RFC 6531: the envelope carried it as is
    assert received_by_postfix(parse(data))[0] == "UTF8SMTPS"


def test_the_signed_copy_verifies_against_the_published_key(run: Run) -> None:
    data = run.copy("dkim")
    der = run.key.public_key().public_bytes(serialization.Encoding.DER,
                                            serialization.PublicFormat.SubjectPublicKeyInfo)
    record = b"v=DKIM1; k=rsa; p=" + base64.b64encode(der)

    def dns(name: bytes, timeout: float = 5) -> bytes | None:
        return record if name == f"{SELECTOR}._domainkey.{DOMAIN}.".encode() else None

    crlf = data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")  # Maildir lines end in LF
    assert parse(data)["DKIM-Signature"] is not None
    assert dkim.verify(crlf, dnsfunc=dns), data[:800]
    assert not dkim.verify(crlf.replace(b"a minute ago", b"an hour ago"), dnsfunc=dns)
    assert all(parse(run.copy(k))["DKIM-Signature"] is None for k in PLAIN if k in DELIVERED)


def test_a_message_over_the_size_limit_fails_with_552(run: Run) -> None:
    row, [attempt] = run.rows["too-big"], run.attempts["too-big"]
    assert row["status"] == "failed", row
    assert "552" in row["last_error"] and "size" in row["last_error"].lower(), row["last_error"]
    assert (attempt["outcome"], attempt["reply_code"], attempt["enhanced_code"]) == ("permanent", 552, "5.3.4")
    assert run.copies("too-big") == {}


def test_an_unknown_recipient_fails_with_550_5_1_1(run: Run) -> None:
    row, [attempt] = run.rows["unknown"], run.attempts["unknown"]
    assert row["status"] == "failed", row
    assert "550" in row["last_error"] and "5.1.1" in row["last_error"], row["last_error"]
    assert (attempt["outcome"], attempt["reply_code"], attempt["enhanced_code"]) == ("permanent", 550, "5.1.1")
    assert run.copies("unknown") == {}


def test_one_refused_recipient_of_two_the_row_is_sent_with_it_in_refused_recipients(run: Run) -> None:
    row, [attempt] = assert_sent(run, "partial"), run.attempts["partial"]
    assert row["refused_recipients"] == ["nobody@example.com"]
    assert "550" in row["last_error"] and "nobody@example.com" in row["last_error"], row["last_error"]
    [refused] = json.loads(attempt["refused"])
    assert (refused["address"], refused["reply_code"]) == ("nobody@example.com", 550)
    assert refused["message"].startswith("5.1.1 <nobody@example.com>: Recipient address rejected"), refused
    assert run.copies("partial").keys() == {"alice@example.com"}


@pytest.mark.parametrize("key", DELIVERED)
def test_spamassassin_scores_each_kind_below_1_with_no_structural_rule(
        run: Run, verdicts: dict[str, Verdict], key: str, figures: Figures) -> None:
    assert key in verdicts, f"{key}: nothing delivered to score"
    verdict = verdicts[key]
    figures(f"spamassassin[{key}]", verdict.describe())
    assert verdict.score < 1.0, verdict.describe()
    assert not [rule for rule in verdict.rules if STRUCTURAL.search(rule)], verdict.describe()
