"""Micro-benchmark: the cost of DKIM-signing one composed message (outbox_mailer/message/dkim_signing.py).

Run:  .venv/bin/python bench/dkim_bench.py [--rounds N] [--bits 2048]

A receipt of about 2 KB (bench/receipts.py: text and HTML bodies) is composed once; then, with a fresh RSA
key, the median over the rounds of:
  * DkimSigner.sign_message()  what each SMTP send costs with OUTBOX_MAILER_DKIM__* set (dkimpy's
                               canonicalisation and hashing, OpenSSL's RSA signature);
  * dkim.sign()                dkimpy alone, whose RSA is pure Python (for comparison);
  * dkim.verify()              what a receiver spends (DNS answered from memory).
Each figure is the median of the rounds' means, in ms of the process's CPU time (process_time: steady on a
machine whose neighbours are busy, and what signing takes from the daemon's one core).
"""

from __future__ import annotations

import argparse
import base64
import importlib.metadata
import platform
import statistics
import sys
import time
import timeit
import uuid
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dkim
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

import receipts
from outbox_mailer.delivery import Delivery
from outbox_mailer.message.compose import compose
from outbox_mailer.message.dkim_signing import DkimSettings, DkimSigner

NOW = datetime(2026, 5, 1, 12, 30, tzinfo=UTC)


def median_ms(run: object, number: int, rounds: int) -> float:
    times = timeit.repeat(run, number=number, repeat=rounds, timer=time.process_time)  # type: ignore[arg-type]
    return statistics.median(times) / number * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--bits", type=int, default=2048)
    args = parser.parse_args()
    row = receipts.receipt(7)
    delivery = Delivery(id=1, dedupe_key="order-7", claim_token=uuid.UUID(int=1), attempts=1, max_attempts=None,
                        from_address="Shop <shop@example.com>", to_addresses=(row["to"],), cc_addresses=(),
                        bcc_addresses=(), reply_to=None, subject=row["subject"], text_body=row["text"],
                        html_body=row["html"], headers={}, attachments=[], metadata={}, transport=None, priority=0,
                        scheduled_at=NOW, expires_at=None, created_at=NOW,
                        message_id="<0662a1b2c3d4e5f6a7b8c9d0e1f2a3b4@example.com>")
    message = compose(delivery, default_from=None, max_message_bytes=10 * 2**20, now=NOW)
    key = rsa.generate_private_key(public_exponent=65537, key_size=args.bits)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    signer = DkimSigner(DkimSettings(domain="example.com", selector="bench", private_key=pem.decode()),
                        max_message_bytes=10 * 2**20)
    signed = signer.sign_message(message).data
    der = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    record = b"v=DKIM1; k=rsa; p=" + base64.b64encode(der)
    assert dkim.verify(signed, dnsfunc=lambda name, timeout=5: record)
    ours = median_ms(lambda: signer.sign_message(message), 200, args.rounds)
    theirs = median_ms(lambda: dkim.sign(message.data, b"bench", b"example.com", pem,
                                         canonicalize=(b"relaxed", b"relaxed"),
                                         include_headers=[b"from", b"to", b"subject", b"date", b"message-id"]),
                       20, args.rounds)
    verify = median_ms(lambda: dkim.verify(signed, dnsfunc=lambda name, timeout=5: record), 200, args.rounds)
    print(f"message {len(message.data)} bytes ({len(signed)} signed), RSA {args.bits}, Python "
          f"{platform.python_version()}, dkimpy {importlib.metadata.version('dkimpy')}, {platform.machine()}")
    print(f"DkimSigner.sign_message: {ours:.2f} ms CPU per message")
    print(f"dkim.sign (pure-Python RSA): {theirs:.2f} ms CPU per message")
    print(f"dkim.verify: {verify:.2f} ms CPU per message")


if __name__ == "__main__":
    main()
