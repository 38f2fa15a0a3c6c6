"""DKIM signing (dkim_signing.py): signatures that dkimpy's verifier accepts against the published key, and
refuses once anything signed changes; the headers signed; UTF-8 headers; settings refused clearly, never
repeating the key. DNS is a stub: nothing here touches the network."""

from __future__ import annotations

import base64
import email.utils
import re
import shutil
import subprocess
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import dkim
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from outbox_mailer.delivery import ComposedMessage, Delivery
from outbox_mailer.errors import CompositionError, ConfigurationError
from outbox_mailer.message.compose import compose
from outbox_mailer.message.dkim_signing import DkimSettings, DkimSigner
from outbox_mailer.settings.checks import source_error
from outbox_mailer.settings.config import load_settings

DOMAIN, SELECTOR = "example.com", "mail2026"
NOW = datetime(2026, 5, 1, 12, 30, tzinfo=UTC)
MESSAGE_ID = "<0662a1b2c3d4e5f6a7b8c9d0e1f2a3b4@example.com>"


def pem_of(key: object, fmt: serialization.PrivateFormat = serialization.PrivateFormat.PKCS8,
           encryption: serialization.KeySerializationEncryption | None = None) -> str:
    return key.private_bytes(serialization.Encoding.PEM, fmt,  # type: ignore[attr-defined]
                             encryption or serialization.NoEncryption()).decode()


@pytest.fixture(scope="module")
def key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def dns_for(key: rsa.RSAPrivateKey, name: bytes = f"{SELECTOR}._domainkey.{DOMAIN}.".encode()) -> Callable[..., bytes | None]:
    """What DNS would answer: the TXT record we tell operators to publish, at its name alone."""
    der = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    record = b"v=DKIM1; k=rsa; p=" + base64.b64encode(der)
    return lambda qname, timeout=5: record if qname == name else None


def signer_for(key: rsa.RSAPrivateKey, *, fmt: serialization.PrivateFormat = serialization.PrivateFormat.PKCS8,
               max_message_bytes: int = 10 * 2**20) -> DkimSigner:
    settings = DkimSettings(domain=DOMAIN, selector=SELECTOR, private_key=pem_of(key, fmt))
    signer = DkimSigner.of(settings, max_message_bytes=max_message_bytes)
    assert signer is not None
    return signer


def composed(**overrides: object) -> ComposedMessage:
    fields: dict[str, object] = dict(
        id=1, dedupe_key="order-42", claim_token=uuid.UUID(int=1), attempts=1, max_attempts=None,
        from_address="Shop <shop@example.com>", to_addresses=("alice@example.org",), cc_addresses=(),
        bcc_addresses=("audit@example.com",), reply_to=None, subject="Your receipt", text_body="Thanks!\n",
        html_body="<p>Thanks!</p>", headers={}, attachments=[], metadata={}, transport=None, priority=0,
        scheduled_at=NOW, expires_at=None, created_at=NOW, message_id=MESSAGE_ID)
    fields.update(overrides)
    return compose(Delivery(**fields), default_from=None, max_message_bytes=10 * 2**20, now=NOW)  # type: ignore[arg-type]


def tags(data: bytes) -> dict[bytes, bytes]:
    """The tags of the topmost DKIM-Signature, unfolded."""
    headers, _ = dkim.rfc822_parse(data)
    value = next(v for n, v in headers if n.lower() == b"dkim-signature")
    return dict(dkim.util.parse_tag_value(re.sub(rb"\s+", b"", value)))


# ---- signatures that verify, and stop verifying when the message changes ------------------------


@pytest.mark.parametrize("fmt", [serialization.PrivateFormat.PKCS8, serialization.PrivateFormat.TraditionalOpenSSL],
                         ids=["pkcs8", "pkcs1"])
def test_a_composed_message_signed_verifies_against_the_published_key(key: rsa.RSAPrivateKey,
                                                                      fmt: serialization.PrivateFormat) -> None:
    message = composed()
    signed = signer_for(key, fmt=fmt).sign_message(message)
    assert signed.data.startswith(b"DKIM-Signature: ") and signed.data.endswith(message.data)
    assert (signed.sender, signed.recipients, signed.message_id) == (message.sender, message.recipients,
                                                                     message.message_id)
    assert dkim.verify(signed.data, dnsfunc=dns_for(key))
    assert not dkim.verify(signed.data, dnsfunc=dns_for(rsa.generate_private_key(65537, 2048))), "another key"


@pytest.mark.parametrize(("old", "new"), [
    (b"Subject: Your receipt", b"Subject: Your receipt!"),
    (b"Thanks!", b"Thanks?"),
    (b"From: \"Shop\" <shop@example.com>", b"From: \"Shop\" <shop@example.net>"),
    (b"To: alice@example.org", b"To: mallory@example.org"),
], ids=["subject", "body", "from", "to"])
def test_a_change_after_signing_fails_verification(key: rsa.RSAPrivateKey, old: bytes, new: bytes) -> None:
    signed = signer_for(key).sign_message(composed()).data
    assert old in signed
    assert not dkim.verify(signed.replace(old, new, 1), dnsfunc=dns_for(key))


def test_relaxed_canonicalisation_survives_refolding_and_trace_headers(key: rsa.RSAPrivateKey) -> None:
    signed = signer_for(key).sign_message(composed()).data
    tampered = b"Received: from relay.example.com by mx.example.org\r\n" + signed.replace(
        b"Subject: Your receipt", b"subject:   Your\r\n  receipt ")
    assert dkim.verify(tampered, dnsfunc=dns_for(key))


def test_the_field_is_byte_identical_to_dkimpys_own_sign_for_the_same_time(key: rsa.RSAPrivateKey) -> None:
    data = composed(cc_addresses=("bob@example.org",), reply_to="help@example.com").data
    signer = signer_for(key)
    theirs = dkim.sign(data, SELECTOR.encode(), DOMAIN.encode(), pem_of(key).encode(),
                       canonicalize=(b"relaxed", b"relaxed"), include_headers=tags(signer.signature(data) + data)[b"h"]
                       .split(b":"))
    assert signer.signature(data, timestamp=int(tags(theirs + data)[b"t"])) == theirs


# ---- what is signed, and how -------------------------------------------------------------------


def test_h_lists_the_present_headers_that_matter_top_to_bottom(key: rsa.RSAPrivateKey) -> None:
    message = composed(cc_addresses=("bob@example.org",), reply_to="help@example.com", headers={
        "List-Unsubscribe": "<https://example.com/u/42>", "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
        "X-Campaign": "spring"})
    signed = signer_for(key).sign_message(message).data
    order = [n.lower() for n, _ in dkim.rfc822_parse(message.data)[0]]
    want = [h for h in order if h in {b"from", b"to", b"cc", b"reply-to", b"subject", b"date", b"message-id",
                                      b"mime-version", b"content-type", b"content-transfer-encoding",
                                      b"list-unsubscribe", b"list-unsubscribe-post"}]
    assert tags(signed)[b"h"].split(b":") == want
    assert {b"from", b"cc", b"reply-to", b"list-unsubscribe", b"list-unsubscribe-post", b"content-type"} <= set(want)
    assert b"x-campaign" not in want and b"bcc" not in order
    assert dkim.verify(signed, dnsfunc=dns_for(key))


def test_only_present_headers_are_listed(key: rsa.RSAPrivateKey) -> None:
    h = tags(signer_for(key).sign_message(composed(html_body=None)).data)[b"h"].split(b":")
    assert b"cc" not in h and b"reply-to" not in h and b"list-unsubscribe" not in h
    assert h.count(b"from") == 1


def test_the_tags_are_rsa_sha256_relaxed_with_t_the_messages_date(key: rsa.RSAPrivateKey) -> None:
    data = composed().data
    t = tags(signer_for(key).signature(data) + data)
    assert (t[b"v"], t[b"a"], t[b"c"], t[b"d"], t[b"s"]) == (b"1", b"rsa-sha256", b"relaxed/relaxed", DOMAIN.encode(),
                                                           SELECTOR.encode())
    assert int(t[b"t"]) == int(NOW.timestamp()) and b"x" not in t and b"l" not in t


def test_the_same_bytes_sign_the_same_way_every_time(key: rsa.RSAPrivateKey) -> None:
    data = composed().data
    assert signer_for(key).signature(data) == signer_for(key).signature(data)
    later = composed().data.replace(email.utils.format_datetime(NOW).encode(), b"Fri, 01 May 2026 12:31:00 +0000")
    assert signer_for(key).signature(later) != signer_for(key).signature(data), "a new Date is a new t="


def test_a_message_without_from_is_not_signed(key: rsa.RSAPrivateKey) -> None:
    with pytest.raises(CompositionError, match="no From header field"):
        signer_for(key).signature(b"To: a@example.org\r\nSubject: s\r\n\r\nbody\r\n")


@pytest.mark.parametrize("date", [b"", b"Date: not a date\r\n"], ids=["none", "unparseable"])
def test_a_message_without_a_usable_date_is_signed_without_t(key: rsa.RSAPrivateKey, date: bytes) -> None:
    data = date + b"From: a@example.com\r\nTo: b@example.org\r\n\r\nbody\r\n"
    signed = signer_for(key).signature(data) + data
    assert b"t" not in tags(signed) and dkim.verify(signed, dnsfunc=dns_for(key))


def test_the_size_limit_holds_for_the_signed_message(key: rsa.RSAPrivateKey) -> None:
    message = composed()
    size = len(signer_for(key).sign_message(message).data)
    assert len(signer_for(key, max_message_bytes=size).sign_message(message).data) == size
    with pytest.raises(CompositionError, match=f"signed message is {size} bytes, over the limit of {size - 1}"):
        signer_for(key, max_message_bytes=size - 1).sign_message(message)


# ---- UTF-8 header fields (RFC 6532) --------------------------------------------------------------

UTF8 = ("Date: Fri, 01 May 2026 12:30:00 +0000\r\nFrom: Zoë Müller <zoë@example.com>\r\n"
        "To: Jürgen <jürgen@exämple.org>\r\nSubject: Grüße\u00a0aus Köln \u2028 ok\r\nMessage-ID: <x@example.com>\r\n"
        "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n"
        "Hallo Zoë,\r\nbis bald.\r\n").encode()


def test_utf8_headers_sign_and_verify(key: rsa.RSAPrivateKey) -> None:
    signed = signer_for(key).signature(UTF8) + UTF8
    assert signed.split(b"\r\n", 1)[0].isascii()
    assert dkim.verify(signed, dnsfunc=dns_for(key))
    # dkimpy works on bytes: U+00A0's UTF-8 (C2 A0) is not white space to the relaxed canonicalisation,
    # so a relay that "normalised" it into a space would break the signature, as it should
    assert not dkim.verify(signed.replace("\u00a0".encode(), b" "), dnsfunc=dns_for(key))
    assert not dkim.verify(signed.replace("Zoë Müller".encode(), "Zoe Müller".encode()), dnsfunc=dns_for(key))


# ---- settings --------------------------------------------------------------------------------------


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    import os

    for name in list(os.environ):
        if name.upper().startswith("OUTBOX_MAILER_") or name == "CREDENTIALS_DIRECTORY":
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return monkeypatch


def refusal(monkeypatch: pytest.MonkeyPatch, **env: str) -> str:
    for name, value in env.items():
        monkeypatch.setenv(f"OUTBOX_MAILER_DKIM__{name}", value)
    with pytest.raises(ConfigurationError) as info:
        load_settings()
    # neither our message nor the ValidationError it comes from (a traceback would print it) repeats the key
    secret = [line for line in env.get("PRIVATE_KEY", "").replace("\\n", "\n").splitlines()
              if len(line) > 12 and "-----" not in line]
    shown = str(info.value) + str(info.value.__cause__)
    assert not any(line in shown or repr(line)[1:-1] in shown for line in secret), shown
    return str(info.value)


def test_off_by_default_and_on_with_all_three(clean_env: pytest.MonkeyPatch, key: rsa.RSAPrivateKey) -> None:
    off = load_settings().dkim
    assert not off.enabled and DkimSigner.of(off, max_message_bytes=1024) is None
    assert off.describe().startswith("off:")
    for name, value in {"DOMAIN": DOMAIN, "SELECTOR": SELECTOR, "PRIVATE_KEY": pem_of(key)}.items():
        clean_env.setenv(f"OUTBOX_MAILER_DKIM__{name}", value)
    on = load_settings()
    assert on.dkim.enabled and on.redacted()["dkim"] == {"domain": DOMAIN, "selector": SELECTOR,
                                                           "private_key": "**********"}
    line = on.dkim.describe()
    assert line.startswith("on:") and DOMAIN in line and SELECTOR in line and "2048-bit" in line
    assert f"{SELECTOR}._domainkey.{DOMAIN}" in line and "BEGIN" not in line


@pytest.mark.parametrize("given", [{"DOMAIN"}, {"SELECTOR"}, {"PRIVATE_KEY"}, {"DOMAIN", "SELECTOR"},
                                   {"DOMAIN", "PRIVATE_KEY"}, {"SELECTOR", "PRIVATE_KEY"}], ids=sorted)
def test_some_but_not_all_three_is_refused_naming_the_missing(clean_env: pytest.MonkeyPatch, key: rsa.RSAPrivateKey,
                                                              given: set[str]) -> None:
    values = {"DOMAIN": DOMAIN, "SELECTOR": SELECTOR, "PRIVATE_KEY": pem_of(key)}
    message = refusal(clean_env, **{k: v for k, v in values.items() if k in given})
    for name in values:
        assert (f"OUTBOX_MAILER_DKIM__{name}" in message) == (name not in given), message
    assert "not set" in message


@pytest.mark.parametrize(("name", "value"), [
    ("DOMAIN", "exa mple.com"), ("DOMAIN", "[192.0.2.1]"), ("DOMAIN", "example.com."), ("DOMAIN", "-x.example"),
    ("DOMAIN", "zoë.example"), ("DOMAIN", ""), ("SELECTOR", "mail_2026"), ("SELECTOR", "a..b"), ("SELECTOR", "x" * 64),
])
def test_domain_and_selector_must_be_dns_names(clean_env: pytest.MonkeyPatch, key: rsa.RSAPrivateKey, name: str,
                                               value: str) -> None:
    values = {"DOMAIN": DOMAIN, "SELECTOR": SELECTOR, "PRIVATE_KEY": pem_of(key), name: value}
    message = refusal(clean_env, **values)
    assert f"OUTBOX_MAILER_DKIM__{name}: " in message and "is not a DNS name" in message


def test_selector_and_domain_may_have_several_labels(clean_env: pytest.MonkeyPatch, key: rsa.RSAPrivateKey) -> None:
    settings = DkimSettings(domain="mail.xn--exmple-cua.org", selector="eu.2026-05", private_key=pem_of(key))
    assert settings.dns_name == "eu.2026-05._domainkey.mail.xn--exmple-cua.org"


def small_rsa_key() -> str:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (cryptography no longer makes keys under 1024 bits)")
    return subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:512"],
                          capture_output=True, text=True, check=True, timeout=60).stdout


@pytest.mark.parametrize(("make", "says"), [
    (lambda k: "not a key at all", "not a PEM private key"),
    (lambda k: pem_of(k)[:200], "not a PEM private key"),
    (lambda k: pem_of(k).replace("\n", "\\n"), "the two characters \\n"),
    (lambda k: "   \n", "empty"),
    (lambda k: k.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo).decode(), "public key"),
    (lambda k: pem_of(k, encryption=serialization.BestAvailableEncryption(b"pw")), "encrypted with a passphrase"),
    (lambda k: pem_of(ed25519.Ed25519PrivateKey.generate()), "an Ed25519 key"),
    (lambda k: pem_of(ec.generate_private_key(ec.SECP256R1())), "not an RSA key"),
    (lambda k: small_rsa_key(), "512 bits: DKIM needs at least 1024"),
], ids=["garbage", "truncated", "escaped-newlines", "empty", "public", "encrypted", "ed25519", "ec", "512-bit"])
def test_a_bad_key_is_refused_saying_why_without_repeating_it(clean_env: pytest.MonkeyPatch, key: rsa.RSAPrivateKey,
                                                             make: Callable[[rsa.RSAPrivateKey], str],
                                                             says: str) -> None:
    pem = make(key)
    message = refusal(clean_env, DOMAIN=DOMAIN, SELECTOR=SELECTOR, PRIVATE_KEY=pem)
    assert message.startswith("invalid configuration: OUTBOX_MAILER_DKIM__PRIVATE_KEY: ") and says in message, message


def test_the_key_comes_from_the_credential_file_dkim__private_key(clean_env: pytest.MonkeyPatch, tmp_path: Path,
                                                                  key: rsa.RSAPrivateKey) -> None:
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "dkim__private_key").write_text(pem_of(key, serialization.PrivateFormat.TraditionalOpenSSL))
    clean_env.setenv("CREDENTIALS_DIRECTORY", str(credentials))
    clean_env.setenv("OUTBOX_MAILER_DKIM__DOMAIN", DOMAIN)
    clean_env.setenv("OUTBOX_MAILER_DKIM__SELECTOR", SELECTOR)
    settings = load_settings()  # the file's name is a known setting: not refused as a typo
    signer = DkimSigner.of(settings.dkim, max_message_bytes=settings.max_message_bytes)
    assert signer is not None and dkim.verify(signer.sign_message(composed()).data, dnsfunc=dns_for(key))
    (credentials / "dkim__private_key").write_bytes(b"\x30\x82\x04\xbd\x02\x01")  # DER, not PEM
    with pytest.raises(ConfigurationError, match=r"dkim__private_key \(OUTBOX_MAILER_DKIM__PRIVATE_KEY\) is not "
                                                 r"valid UTF-8"):
        load_settings()


def test_an_unreadable_credential_file_names_its_setting(tmp_path: Path) -> None:
    path = tmp_path / "dkim__private_key"
    error = source_error(PermissionError(13, "Permission denied", str(path)), str(tmp_path))
    assert str(error) == f"invalid configuration: OUTBOX_MAILER_DKIM__PRIVATE_KEY: cannot read {path}: Permission denied"
    assert error.setting == "OUTBOX_MAILER_DKIM__PRIVATE_KEY"
