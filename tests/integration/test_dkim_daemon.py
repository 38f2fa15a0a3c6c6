"""DKIM end to end: the daemon, with OUTBOX_MAILER_DKIM__* set and its transports built as `run` builds them
(daemon/transport_factory.py), sends rows to the test SMTP server, and what the server received verifies against the
public key with dkimpy's verifier (DNS answered by a stub: no network)."""

from __future__ import annotations

import base64
import contextlib
import email.utils
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import dkim
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from outbox_mailer.daemon.service import Daemon
from outbox_mailer.daemon.transport_factory import build_transports
from outbox_mailer.store import Store
from tests.in_process_daemon import Running, settings_for
from tests.integration.conftest import insert
from tests.smtp_server import SmtpTestServer

pytestmark = pytest.mark.anyio

DOMAIN, SELECTOR = "example.com", "outbox"


@pytest.fixture(scope="module")
def key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def dns_for(key: rsa.RSAPrivateKey) -> Callable[..., bytes | None]:
    der = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    record = b"v=DKIM1; k=rsa; p=" + base64.b64encode(der)
    return lambda name, timeout=5: record if name == f"{SELECTOR}._domainkey.{DOMAIN}.".encode() else None


@contextlib.asynccontextmanager
async def daemon_with_dkim(db_url: str, server: SmtpTestServer, store: Store, key: rsa.RSAPrivateKey,
                           **overrides: Any) -> AsyncIterator[Running]:
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    settings = settings_for(db_url, server, dkim={"domain": DOMAIN, "selector": SELECTOR, "private_key": pem},
                            **overrides)
    transports = build_transports(settings)
    daemon = Daemon(settings, transports)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            yield Running(daemon, store)
            daemon.stop()
    finally:
        for transport in transports.values():
            await transport.aclose()


def signature_tags(data: bytes) -> list[dict[bytes, bytes]]:
    headers, _ = dkim.rfc822_parse(data)
    return [dict(dkim.util.parse_tag_value(re.sub(rb"\s+", b"", v))) for n, v in headers
            if n.lower() == b"dkim-signature"]


async def test_every_smtp_transport_signs_once_and_the_received_message_verifies(
        db_url: str, store: Store, smtp_server: SmtpTestServer, key: rsa.RSAPrivateKey) -> None:
    backup = {"kind": "smtp", "host": smtp_server.host, "port": smtp_server.port, "tls": "none"}
    await insert(store, "receipt", cc_addresses=["cc@example.org"], reply_to="help@example.com",
                 headers={"List-Unsubscribe": "<https://example.com/u/1>",
                          "List-Unsubscribe-Post": "List-Unsubscribe=One-Click"})
    await insert(store, "via-backup", transport="backup")
    async with daemon_with_dkim(db_url, smtp_server, store, key, transports={"backup": backup}) as r:
        rows = await r.final("receipt", "via-backup")
    assert {row["status"] for row in rows.values()} == {"sent"}
    assert [a["transport"] for a in await store.attempts(rows["via-backup"]["id"])] == ["backup"]
    received = [m.data for m in smtp_server.accepted]
    assert sorted(len(m.rcpt_tos) for m in smtp_server.accepted) == [1, 2]  # one per row, whichever transport
    for data in received:
        [tags] = signature_tags(data)
        assert (tags[b"d"], tags[b"s"], tags[b"a"], tags[b"c"]) == (DOMAIN.encode(), SELECTOR.encode(),
                                                                   b"rsa-sha256", b"relaxed/relaxed")
        assert dkim.verify(data, dnsfunc=dns_for(key)), data[:600]
        assert not dkim.verify(data.replace(b"Subject: hello", b"Subject: hellO"), dnsfunc=dns_for(key))
    receipt = next(d for d in received if b"List-Unsubscribe" in d)
    assert signature_tags(receipt)[0][b"h"].split(b":") == [
        b"date", b"from", b"to", b"cc", b"reply-to", b"subject", b"message-id", b"list-unsubscribe",
        b"list-unsubscribe-post", b"mime-version", b"content-type", b"content-transfer-encoding"]


async def test_a_retried_row_is_signed_afresh_each_attempt_with_t_its_date(
        db_url: str, store: Store, smtp_server: SmtpTestServer, key: rsa.RSAPrivateKey) -> None:
    smtp_server.fail("DATA", "451 4.3.0 try again later", times=1)
    await insert(store, "again")
    async with daemon_with_dkim(db_url, smtp_server, store, key) as r:
        rows = await r.final("again")
    assert rows["again"]["status"] == "sent" and rows["again"]["attempts"] == 2
    assert [m.accepted for m in smtp_server.messages] == [False, True]
    for message in smtp_server.messages:
        [tags] = signature_tags(message.data)  # one signature each: never a second on top of the first
        date = email.message_from_bytes(message.data)["Date"]
        assert int(tags[b"t"]) == int(email.utils.parsedate_to_datetime(date).timestamp())
        assert dkim.verify(message.data, dnsfunc=dns_for(key))


async def test_a_message_over_the_size_limit_once_signed_fails_without_a_connection(
        db_url: str, store: Store, smtp_server: SmtpTestServer, key: rsa.RSAPrivateKey) -> None:
    # about 800 bytes composed, under the 1024-byte limit; the ~570-byte DKIM-Signature takes it over
    await insert(store, "big", text_body="x" * 60 + "\n" + "y" * 300)
    async with daemon_with_dkim(db_url, smtp_server, store, key, max_message_bytes=1024) as r:
        rows = await r.final("big")
    assert rows["big"]["status"] == "failed"
    found = re.search(r"cannot DKIM-sign: message: signed message is (\d+) bytes, over the limit of 1024 \(the "
                      r"DKIM-Signature adds (\d+)\)", rows["big"]["last_error"])
    assert found, rows["big"]["last_error"]
    assert int(found[1]) - int(found[2]) <= 1024 < int(found[1]), "composed within the limit, signed over it"
    assert smtp_server.messages == [] and smtp_server.connections == 0


async def test_the_relays_idempotency_header_goes_under_the_signature_unsigned(
        db_url: str, store: Store, smtp_server: SmtpTestServer, key: rsa.RSAPrivateKey) -> None:
    smtp = {"host": smtp_server.host, "port": smtp_server.port, "tls": "none", "command_timeout_seconds": 2,
            "idempotency_header": "X-Idempotency-Key"}
    await insert(store, "keyed")
    async with daemon_with_dkim(db_url, smtp_server, store, key, smtp=smtp) as r:
        assert (await r.final("keyed"))["keyed"]["status"] == "sent"
    [message] = smtp_server.accepted
    first, _second = message.data.split(b"\r\n")[:2]
    # added before signing, so the size limit counts it; not in h=, so a relay may drop it
    assert first.startswith(b"DKIM-Signature: ") and message.data.count(b"\r\nX-Idempotency-Key: ") == 1
    assert b"x-idempotency-key" not in signature_tags(message.data)[0][b"h"]
    assert dkim.verify(message.data, dnsfunc=dns_for(key))
