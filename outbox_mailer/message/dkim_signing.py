"""DKIM signing (RFC 6376) of what the SMTP transports send: :class:`DkimSettings` and :class:`DkimSigner`.

``OUTBOX_MAILER_DKIM__DOMAIN``, ``__SELECTOR`` and ``__PRIVATE_KEY`` (PEM, usually the credential file
``dkim__private_key``): all three sign, none signs nothing, anything in between refuses start-up naming what is
missing. Domain and selector are DNS host names (:func:`~outbox_mailer.message.host_names.is_host_name`); the key, an
unencrypted RSA key of at least 1024 bits (PKCS#1 or PKCS#8), is parsed at start-up; no error repeats it.

A signature is ``a=rsa-sha256; c=relaxed/relaxed``, ``h=`` the fields of :data:`SIGNED_HEADERS` the message has
(top to bottom; no From, no signature), ``bh=`` over the whole body, no ``l=`` or ``x=``, and ``t=`` the message's
own Date rather than the clock: the same composed message always gets the same signature, on any host at any
time (a retry composes a new Date). The SMTP transports alone sign (daemon/transport_factory.py gives them the
signer), once per send, before the first byte goes out, checking the size limit on the signed bytes; provider
APIs take JSON fields and sign with the keys of the account's domain.

dkimpy splits the header, canonicalises, picks the field instances ``h=`` covers, feeds the hash and folds; the
RSA signature is OpenSSL's (``cryptography``), because ``dkim.sign()`` computes it in pure Python, ten times
slower (docs/configuration.md), and always writes the wall clock into ``t=``. tests/unit/test_dkim_signing.py
proves the field byte-identical to ``dkim.sign()``'s for the same ``t=``. No ed25519-sha256 (RFC 8463): dkimpy
needs PyNaCl and a raw key for it, and receivers that do not verify it would see an unsigned message.
"""

from __future__ import annotations

import base64
import dataclasses
import email.utils
import hashlib
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, SecretStr, field_validator, model_validator

from ..delivery import ComposedMessage
from ..errors import CompositionError
from .host_names import is_host_name

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

__all__ = ["SIGNED_HEADERS", "DkimSettings", "DkimSigner", "load_private_key"]

SETTING = "OUTBOX_MAILER_DKIM__"
# RFC 6376 5.4's list, trimmed to what compose writes; List-Unsubscribe-Post too: RFC 8058 asks for both signed
SIGNED_HEADERS = frozenset({
    b"from", b"to", b"cc", b"reply-to", b"subject", b"date", b"message-id", b"mime-version", b"content-type",
    b"content-transfer-encoding", b"list-unsubscribe", b"list-unsubscribe-post",
    b"in-reply-to", b"references", b"list-id",  # a row's own headers, when it has them
})
MIN_KEY_BITS = 1024  # RFC 8301: at least 1024 bits; 2048 recommended
CANONICALIZATION = b"relaxed/relaxed"
_FIELD = b"DKIM-Signature"
_NEW_KEY = "openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out dkim.pem"


def load_private_key(pem: str) -> RSAPrivateKey:
    """The RSA private key in ``pem``; ValueError saying what is wrong with it, never repeating it."""
    # cryptography only when a key is set (~45 ms of import)
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    text = pem.strip()
    if not text:
        raise ValueError("empty: expected an RSA private key in PEM form")
    if "PRIVATE KEY-----" not in text and ("PUBLIC KEY-----" in text or "CERTIFICATE-----" in text):
        raise ValueError("this is a public key or a certificate: the setting takes the private key "
                         "(the public key goes into DNS)")
    try:
        key = load_pem_private_key(text.encode("utf-8", "replace"), password=None)
    except TypeError:
        raise ValueError("the key is encrypted with a passphrase: store it decrypted, readable by the daemon "
                         "alone (openssl pkey -in dkim.pem -out plain.pem)") from None
    except (ValueError, UnsupportedAlgorithm):
        hint = (" it holds the two characters \\n where its line breaks belong;" if "\\n" in text else "")
        raise ValueError("not a PEM private key (-----BEGIN PRIVATE KEY----- or -----BEGIN RSA PRIVATE KEY-----, "
                         f"base64 lines, -----END ...-----);{hint} the credential file dkim__private_key keeps "
                         "the PEM as it is") from None
    # ValueError, not TypeError: pydantic reports only the former as a setting's validation error
    if isinstance(key, ed25519.Ed25519PrivateKey):
        raise ValueError("an Ed25519 key: outbox-mailer signs rsa-sha256 only (many receivers do not "
                         f"verify ed25519-sha256 yet); make an RSA key: {_NEW_KEY}")
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ValueError(f"not an RSA key: outbox-mailer signs rsa-sha256; make one: {_NEW_KEY}")
    if key.key_size < MIN_KEY_BITS:
        raise ValueError(f"an RSA key of {key.key_size} bits: DKIM needs at least {MIN_KEY_BITS} (RFC 8301) "
                         f"and receivers want 2048: {_NEW_KEY}")
    return key


class DkimSettings(BaseModel):
    """``OUTBOX_MAILER_DKIM__*``: sign SMTP mail with one key. All three set, or none (off)."""

    model_config = ConfigDict(hide_input_in_errors=True)  # an error's text would repeat the key

    domain: str | None = None  # d=: the From domain or its parent (DMARC alignment); punycode for IDN
    selector: str | None = None  # s=: the public key is the TXT record <selector>._domainkey.<domain>
    private_key: SecretStr | None = None  # RSA >= 1024 bits, PEM (PKCS#1 or PKCS#8); credential dkim__private_key

    @field_validator("domain", "selector")
    @classmethod
    def _dns_name(cls, value: str | None) -> str | None:
        if value is not None and not is_host_name(value):
            raise ValueError(f"{value!r} is not a DNS name (letters, digits and '-' in dot-separated labels of "
                             "at most 63 characters; punycode for a non-ASCII domain)")
        return value

    @field_validator("private_key")
    @classmethod
    def _key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            load_private_key(value.get_secret_value())
        return value

    @model_validator(mode="after")
    def _all_or_none(self) -> DkimSettings:
        given = {"DOMAIN": self.domain, "SELECTOR": self.selector, "PRIVATE_KEY": self.private_key}
        missing = [SETTING + name for name, value in given.items() if value is None]
        if 0 < len(missing) < len(given):
            raise ValueError(f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set: DKIM "
                             "signing needs the domain, the selector and the private key together (none of "
                             "them: no signing)")
        if self.enabled and len(self.dns_name) > 253:
            raise ValueError(f"{self.dns_name!r}, the key's DNS name, is longer than 253 characters")
        return self

    @property
    def enabled(self) -> bool:
        return self.private_key is not None  # and so are the other two

    @property
    def dns_name(self) -> str:
        """Where the public key is published: ``<selector>._domainkey.<domain>``."""
        return f"{self.selector}._domainkey.{self.domain}"

    def describe(self) -> str:
        """One line for ``outbox-mailer check``: on or off, domain, selector, key size; never the key."""
        if self.private_key is None:
            return (f"off: set {SETTING}DOMAIN, __SELECTOR and __PRIVATE_KEY to sign the mail of the SMTP "
                    "transports")
        bits = load_private_key(self.private_key.get_secret_value()).key_size
        return (f"on: domain (d=) {self.domain}, selector (s=) {self.selector}, rsa-sha256 with a {bits}-bit key, "
                f"c=relaxed/relaxed; public key expected in the TXT record {self.dns_name}; SMTP transports "
                "sign, provider APIs sign with the account's own keys")


class DkimSigner:
    """Signs messages with one domain, selector and key: pure (no I/O, no clock) and thread-safe."""

    def __init__(self, settings: DkimSettings, *, max_message_bytes: int) -> None:
        if settings.private_key is None or settings.domain is None or settings.selector is None:
            raise ValueError("DKIM signing is off: no signer")
        import dkim  # noqa: F401  (now, ~90 ms with dnspython, rather than in the first send)
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding, utils

        self.domain = settings.domain
        self.selector = settings.selector
        self.max_message_bytes = max_message_bytes
        self._key = load_private_key(settings.private_key.get_secret_value())
        self._padding, self._prehashed = padding.PKCS1v15(), utils.Prehashed(hashes.SHA256())

    @classmethod
    def of(cls, settings: DkimSettings, *, max_message_bytes: int) -> DkimSigner | None:
        """The signer the settings ask for; None when DKIM is off."""
        return cls(settings, max_message_bytes=max_message_bytes) if settings.enabled else None

    def sign_message(self, message: ComposedMessage) -> ComposedMessage:
        """``message`` with its DKIM-Signature on top. CompositionError when it cannot be signed, or when the
        signed message is over ``max_message_bytes`` (the limit holds for what is sent)."""
        data = self.signature(message.data) + message.data
        if len(data) > self.max_message_bytes:
            added = len(data) - len(message.data)
            raise CompositionError("message", f"signed message is {len(data)} bytes, over the limit of "
                                   f"{self.max_message_bytes} (the DKIM-Signature adds {added})")
        return dataclasses.replace(message, data=data)

    def signature(self, data: bytes, *, timestamp: int | None = None) -> bytes:
        """The DKIM-Signature field (CRLF-terminated) of the message ``data``; ``t=`` is ``timestamp``, else
        the message's Date (no ``t=`` when it has none that parses). CompositionError if it cannot be signed."""
        import dkim  # here, not at the top: dkimpy imports dnspython (~90 ms), which only a signing daemon needs

        try:
            headers, body = dkim.rfc822_parse(data)
        except dkim.MessageFormatError as exc:
            raise CompositionError("message", f"cannot be DKIM-signed: {exc}") from None
        include = [name.lower() for name, _ in headers if name.lower() in SIGNED_HEADERS]
        if b"from" not in include:
            raise CompositionError("message", "cannot be DKIM-signed: it has no From header field")
        if timestamp is None:
            timestamp = _date_of(headers)
        policy = dkim.CanonicalizationPolicy.from_c_value(CANONICALIZATION)
        domain = self.domain.encode("ascii")
        # the tags in the order of dkimpy's DKIM.sign(), and its b= placeholder, which folds onto a line of its own
        fields = [(b"v", b"1"), (b"a", b"rsa-sha256"), (b"c", CANONICALIZATION), (b"d", domain),
                  (b"i", b"@" + domain), (b"q", b"dns/txt"), (b"s", self.selector.encode("ascii"))]
        if timestamp is not None:
            fields.append((b"t", b"%d" % timestamp))
        fields += [(b"h", b" : ".join(include)),
                   (b"bh", base64.b64encode(hashlib.sha256(policy.canonicalize_body(body)).digest())),
                   (b"b", b"0" * 60)]
        unsigned = dkim.RE_BTAG.sub(b"\\1", dkim.fold(b"; ".join(b"=".join(f) for f in fields), namelen=len(_FIELD)))
        hasher = hashlib.sha256()
        dkim.hash_headers(hasher, policy, policy.canonicalize_headers(headers), include, (_FIELD, b" " + unsigned),
                          None)
        fields[-1] = (b"b", base64.b64encode(self._key.sign(hasher.digest(), self._padding, self._prehashed)))
        folded: bytes = dkim.fold(b"; ".join(b"=".join(f) for f in fields) + b"\r\n", namelen=len(_FIELD))
        return _FIELD + b": " + folded


def _date_of(headers: list[list[bytes]]) -> int | None:
    """The first Date field as seconds since the epoch; None when missing, unparseable or before 1970."""
    for name, value in headers:
        if name.lower() == b"date":
            parsed = email.utils.parsedate_tz(value.decode("ascii", "replace").strip())
            try:
                seconds = None if parsed is None else email.utils.mktime_tz(parsed)
            except (OverflowError, ValueError):
                return None
            return seconds if seconds is not None and seconds >= 0 else None
    return None
