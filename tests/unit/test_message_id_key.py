"""The key the claim statement computes Message-IDs with (its SQL is tested in
tests/integration/test_message_ids.py): HMAC's pads of any secret, and the fallback domain."""

from __future__ import annotations

import hashlib
import hmac
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from outbox_mailer.message.message_ids import DEFAULT_KEY, DEFAULT_SECRET, MessageIdKey, is_message_id
from outbox_mailer.settings.config import Settings


def sql_hmac(key: MessageIdKey, message: bytes) -> bytes:
    """What the claim computes: sha256($9 || sha256($8 || dedupe key))."""
    return hashlib.sha256(key.outer_pad + hashlib.sha256(key.inner_pad + message).digest()).digest()


@given(secret=st.one_of(st.binary(max_size=150), st.integers(0, 200).map(lambda n: bytes(range(1, n + 1)))),
       message=st.binary(max_size=300))
def test_the_pads_make_hmac_sha256_for_any_secret(secret: bytes, message: bytes) -> None:
    key = MessageIdKey.of(secret, None)
    assert len(key.inner_pad) == len(key.outer_pad) == 64  # longer secrets are hashed first (RFC 2104)
    assert sql_hmac(key, message) == hmac.new(secret, message, hashlib.sha256).digest()


def test_the_secret_setting_is_used_and_the_built_in_one_otherwise() -> None:
    url = "postgresql://u@127.0.0.1:1/db"
    custom = Settings(database_url=url, message_id_secret="s3cret").message_id_key()
    assert sql_hmac(custom, b"k") == hmac.new(b"s3cret", b"k", hashlib.sha256).digest()
    built_in = Settings(database_url=url).message_id_key()
    assert sql_hmac(built_in, b"k") == hmac.new(DEFAULT_SECRET, b"k", hashlib.sha256).digest()
    assert built_in == DEFAULT_KEY


@pytest.mark.parametrize(("default_from", "domain"), [
    ("Shop <noreply@Shop.Example.com>", "shop.example.com"),
    ("info@bücher.example.com", "xn--bcher-kva.example.com"),  # the ASCII form the claim cannot compute
])
def test_the_fallback_domain_is_the_default_senders_in_ascii(default_from: str, domain: str) -> None:
    assert MessageIdKey.of(b"s", default_from).fallback_domain == domain


def test_without_a_default_sender_the_fallback_is_this_hosts_name() -> None:
    host = socket.gethostname().lower()
    assert MessageIdKey.of(b"s", None).fallback_domain in {host, "localhost"}


@pytest.mark.parametrize(("value", "ok"), [
    ("<0662a1b2c3d4e5f6a7b8c9d0e1f2a3b4@example.com>", True),
    ("<0662a1b2c3d4e5f6a7b8c9d0e1f2a3b4@localhost>", True),
    ("<0662a1b2c3d4e5f6a7b8c9d0e1f2a3b4@Example.com>", False),  # the claim writes lower case
    ("<0662a1b2c3d4e5f6a7b8c9d0e1f2a3b@example.com>", False),
    ("<0662a1b2c3d4e5f6a7b8c9d0e1f2a3b4@example.com>\r\nBcc: x@example.net", False),
    (None, False),
])
def test_only_the_claims_form_is_a_message_id(value: object, ok: bool) -> None:
    assert is_message_id(value) is ok
