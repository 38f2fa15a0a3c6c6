"""Micro-benchmark: µs per compose() for a few typical rows, next to EmailMessage.

Run:  .venv/bin/python bench/compose_bench.py [--repeat N]

For each row it prints the median over several rounds of:
  * compose()           the full path the daemon takes (validation, addresses,
                        Message-ID, headers, MIME body, size check), once with
                        the same row repeated (address checks cached), once
                        with To/Cc addresses never seen before (at domains seen
                        before: each domain is checked once), and once with
                        To/Cc addresses at domains never seen before either;
  * EmailMessage        what a hand-written worker does: build the same message
                        with email.message.EmailMessage (default policy) and
                        render it with as_bytes();
  * ratio               EmailMessage / compose() with new recipients.

The last row is the core run's email (bench/common.py: its bodies, no from_address,
the configured default sender).  On a shared machine wall-clock medians drift with
the neighbours' load: --cpu takes the least CPU time (process_time) over the rounds
instead, the figure to compare checkouts with (run each a few times, alternating).
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import email.policy
import os
import platform
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import common
from outbox_mailer.delivery import Delivery
from outbox_mailer.message.compose import compose

NOW = datetime(2026, 5, 1, 12, 30, tzinfo=UTC)
MESSAGE_ID = "<0662a1b2c3d4e5f6a7b8c9d0e1f2a3b4@example.com>"  # as the claim writes it (message_ids.py)

TEXT = (
    "Hi Alice,\n\nthanks for your order #1042. We will ship it within two working days.\n"
    "You can follow the parcel at https://shop.example.com/orders/1042/track?ref=mail\n\n"
    "Items:\n  1 x Coffee beans, 1 kg      14.90 EUR\n  2 x Filter papers            3.80 EUR\n\n"
    "Total: 22.50 EUR\n\n-- \nExample Shop, Main Street 1, 12345 Example City\n"
)
HTML = (
    "<!doctype html><html><body style=\"font-family: sans-serif\">"
    "<p>Hi Alice,</p><p>thanks for your order <b>#1042</b>. We will ship it within two working days.</p>"
    "<p><a href=\"https://shop.example.com/orders/1042/track?ref=mail\">Track your parcel</a></p>"
    "<table><tr><td>1 x Coffee beans, 1 kg</td><td>14.90 EUR</td></tr>"
    "<tr><td>2 x Filter papers</td><td>3.80 EUR</td></tr></table>"
    "<p>Total: <b>22.50 EUR</b></p><hr><p>Example Shop, Main Street 1, 12345 Example City</p>"
    "</body></html>\n"
)


def delivery(**overrides: Any) -> Delivery:
    fields: dict[str, Any] = dict(
        id=1, dedupe_key="order-1042-receipt", claim_token=uuid.UUID(int=1), attempts=1,
        max_attempts=None, from_address="Example Shop <shop@example.com>",
        to_addresses=("Alice Example <alice@example.com>", "bob@example.org"),
        cc_addresses=(), bcc_addresses=(), reply_to=None, subject="Your receipt for order #1042",
        text_body=TEXT, html_body=HTML, headers={}, attachments=[], metadata={}, transport=None,
        priority=0, scheduled_at=NOW, expires_at=None, created_at=NOW, message_id=MESSAGE_ID,
    )
    fields.update(overrides)
    return Delivery(**fields)


ROWS: dict[str, Delivery] = {
    "text+html, 2 recipients": delivery(),
    "text only, 1 recipient": delivery(to_addresses=("alice@example.com",), html_body=None),
    "non-ASCII subject/names/body": delivery(
        subject="Ihre Bestellung — Grüße aus Köln 🎉", from_address="Bücherstube Müller <shop@example.com>",
        to_addresses=("Jörg Müller <jorg@example.com>", "山田 太郎 <yamada@example.org>"),
        text_body=TEXT.replace("Alice", "Jörg").replace("EUR", "€"),
        html_body=HTML.replace("Alice", "Jörg").replace("EUR", "€"),
    ),
    "text+html + 20 KB PDF, cc, headers": delivery(
        cc_addresses=("accounts@example.com",), reply_to="Support <support@example.com>",
        headers={"List-Unsubscribe": "<https://shop.example.com/u/abc123>", "X-Campaign": "receipts"},
        attachments=[{
            "filename": "invoice-1042.pdf", "content_type": "application/pdf",
            "content_base64": base64.b64encode(bytes(range(256)) * 80).decode("ascii"),
        }],
    ),
    "core run's email, default sender": delivery(
        from_address=None, to_addresses=("Customer 1042 <customer1042@example.com>",),
        subject="Your order #1042 has shipped", text_body=common.TEXT_BODY.replace("{n}", "1042"),
        html_body=common.HTML_BODY.replace("{n}", "1042"), metadata={"order_id": 1042, "kind": "shipping"},
    ),
}
CLOCK = time.perf_counter
SUMMARY = statistics.median


def run_compose(row: Delivery) -> bytes:
    return compose(row, default_from=common.DEFAULT_FROM if row.from_address is None else None,
                   max_message_bytes=10 << 20, now=NOW).data


def run_email_message(row: Delivery) -> bytes:
    """The same message as a typical worker builds it with the standard library."""
    msg = EmailMessage(policy=email.policy.SMTP)
    msg["Date"] = format_datetime(NOW)
    msg["From"] = row.from_address or common.DEFAULT_FROM
    msg["To"] = ", ".join(row.to_addresses)
    if row.cc_addresses:
        msg["Cc"] = ", ".join(row.cc_addresses)
    if row.reply_to:
        msg["Reply-To"] = row.reply_to
    msg["Subject"] = row.subject
    msg["Message-ID"] = make_msgid(domain="example.com")
    for name, value in row.headers.items():
        msg[name] = value
    if row.text_body is not None:
        msg.set_content(row.text_body)
        if row.html_body is not None:
            msg.add_alternative(row.html_body, subtype="html")
    else:
        msg.set_content(row.html_body, subtype="html")
    for att in row.attachments:
        maintype, subtype = att["content_type"].split("/")
        msg.add_attachment(base64.b64decode(att["content_base64"]), maintype=maintype,
                           subtype=subtype, filename=att["filename"])
    return msg.as_bytes()


def per_call_us(fn: Any, rows: list[Delivery], rounds: int) -> float:
    """Median (--cpu: least) over ``rounds`` of the mean time of ``fn`` over ``rows`` (one call each)."""
    fn(rows[0])  # warm up
    samples = []
    for _ in range(rounds):
        start = CLOCK()
        for row in rows:
            fn(row)
        samples.append((CLOCK() - start) / len(rows) * 1e6)
    return SUMMARY(samples)


def with_new_recipients(row: Delivery, count: int, offset: int, *, new_domains: bool = False) -> list[Delivery]:
    """Copies of ``row`` whose To/Cc addresses were never seen: address validation is not cached
    (nor, with ``new_domains``, the check of their domains)."""
    def fresh(addresses: tuple[str, ...], i: int, tag: str) -> tuple[str, ...]:
        domain = f"d{i}.example.net" if new_domains else "example.net"
        return tuple(f"Person {i} <{tag}{i}.{n}@{domain}>" for n in range(len(addresses)))
    return [
        dataclasses.replace(row, to_addresses=fresh(row.to_addresses, offset + i, "to"),
                            cc_addresses=fresh(row.cc_addresses, offset + i, "cc"))
        for i in range(count)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=2000, help="calls per round for compose()")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--cpu", action="store_true", help="least CPU time over the rounds, not the wall-clock median")
    args = parser.parse_args()
    global CLOCK, SUMMARY
    if args.cpu:
        CLOCK, SUMMARY = time.process_time, min
    print(f"Python {platform.python_version()} ({platform.python_implementation()}) on "
          f"{platform.machine()}, {os.cpu_count()} CPUs")
    print("compose µs: same row again and again (the sender's and recipients' address checks are")
    print("cached); new rcpt: every call with To/Cc addresses never seen before (uncached checks,")
    print("at a domain checked before); new domain: To/Cc at domains never seen before either.")
    print(f"{'row':36} {'bytes':>6} {'compose µs':>11} {'new rcpt µs':>12} {'new domain µs':>14} "
          f"{'EmailMessage µs':>16} {'ratio':>6}")
    offset = 0
    for label, row in ROWS.items():
        size = len(run_compose(row))
        fast = per_call_us(run_compose, [row] * args.number, args.rounds)
        # A fresh list of rows per round, each row used once: every address check misses the cache.
        cold = SUMMARY(
            per_call_us(run_compose, with_new_recipients(row, args.number // 4, offset + k * args.number), 1)
            for k in range(args.rounds)
        )
        offset += args.rounds * args.number
        colder = SUMMARY(
            per_call_us(run_compose, with_new_recipients(
                row, args.number // 4, offset + k * args.number, new_domains=True), 1)
            for k in range(args.rounds)
        )
        offset += args.rounds * args.number
        slow = per_call_us(run_email_message, [row] * max(1, args.number // 20), args.rounds)
        print(f"{label:36} {size:6d} {fast:11.1f} {cold:12.1f} {colder:14.1f} {slow:16.1f} {slow / cold:5.1f}x")
    print("ratio: EmailMessage / compose() with new recipients")


if __name__ == "__main__":
    main()
