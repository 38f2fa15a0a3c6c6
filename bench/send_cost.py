"""The daemon's own cost per email of composing and sending through SMTP, without the database.

Usage: python bench/send_cost.py [--emails N] [--compose-only] [--callgrind]

It starts Postfix's smtp-sink on 127.0.0.1 (killed by PID at the end) and, in one process,
composes the core run's email (bench/common.py: text and HTML bodies, the configured default
sender, a recipient never seen before for each email) and sends it with the daemon's
SmtpTransport (8 connections, a worker for each as the daemon's lane has, pipelined), as
`outbox-mailer run` does between a claim and its outcome write. ``--compose-only`` composes and sends nothing.

It prints the process's CPU time per email (user + system, ``time.process_time()``: the
kernel's socket work included; it moves with the neighbours' load). ``--callgrind`` prints
instead the instructions per email the process executes in user space, counted by
``valgrind --tool=callgrind`` over two runs (200 and 1,200 emails; their difference, so that
start-up is not counted): the same from run to run to within 0.1%, whatever else the machine
runs, so two checkouts compare exactly (``PYTHONPATH=OTHER_CHECKOUT``); the kernel's share
(socket writes and reads, the same system calls in both) is not in it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime

import outbox_mailer
from outbox_mailer.delivery import Delivery, OutcomeKind
from outbox_mailer.message.compose import compose
from outbox_mailer.settings.transports import SmtpSettings
from outbox_mailer.transports.smtp import SmtpTransport

# The package above comes from PYTHONPATH when it names a checkout; common, imported only now,
# puts this checkout first on sys.path for what is imported after it.
CHECKOUT = os.path.dirname(os.path.dirname(outbox_mailer.__file__))

import common  # noqa: E402
from bootstrap import ensure_smtp_sink  # noqa: E402
from processes import PY, SmtpSink  # noqa: E402

NOW = datetime(2026, 5, 1, 12, 30, tzinfo=UTC)
IN_FLIGHT = 8  # as a lane of the daemon: one worker per connection (transport.max_parallel)
CALLGRIND_EMAILS = (200, 1_200)


def row(n: int) -> Delivery:
    return Delivery(
        id=n, dedupe_key=f"order-{n}", claim_token=uuid.UUID(int=n), attempts=1, max_attempts=None,
        from_address=None, to_addresses=(f"Customer {n} <customer{n}@example.com>",), cc_addresses=(),
        bcc_addresses=(), reply_to=None, subject=f"Your order #{n} has shipped",
        text_body=common.TEXT_BODY.replace("{n}", str(n)), html_body=common.HTML_BODY.replace("{n}", str(n)),
        headers={}, attachments=[], metadata={"order_id": n, "kind": "shipping"}, transport=None, priority=0,
        scheduled_at=NOW, expires_at=None, created_at=NOW, message_id=f"<{n:032x}@example.com>",
    )


async def measure(port: int, emails: int, compose_only: bool) -> float:
    """CPU seconds of composing (and sending) ``emails`` emails, after a warm-up that opens the connections."""
    transport = SmtpTransport(SmtpSettings(host="127.0.0.1", port=port, tls="none", helo_name="bench.example.com",
                                           pool_size=8))

    async def carry(rows: list[Delivery]) -> None:
        queue = iter(rows)

        async def worker() -> None:
            for r in queue:
                message = compose(r, default_from=common.DEFAULT_FROM, max_message_bytes=10 << 20, now=NOW)
                if not compose_only:
                    outcome = await transport.send(message, r)
                    if outcome.kind is not OutcomeKind.SENT:
                        raise RuntimeError(f"not sent: {outcome.error}")

        await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))

    await carry([row(n) for n in range(10**9, 10**9 + 2 * IN_FLIGHT)])
    rows = [row(n) for n in range(emails)]
    start = time.process_time()
    await carry(rows)
    spent = time.process_time() - start
    await transport.aclose()
    return spent


def instructions(port: int, emails: int, compose_only: bool) -> int:
    """User-space instructions of a whole run of this script for ``emails`` emails, by callgrind."""
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", PY, __file__, "--port", str(port),
           "--emails", str(emails)] + ["--compose-only"] * compose_only
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "0"})
    found = re.search(r"Collected : (\d+)", out.stderr)
    if found is None:
        raise RuntimeError(f"callgrind printed no count:\n{out.stderr[-2000:]}")
    return int(found[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--emails", type=int, default=20_000)
    parser.add_argument("--compose-only", action="store_true")
    parser.add_argument("--callgrind", action="store_true", help="user-space instructions per email, by valgrind")
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)  # a sink already started (the callgrind runs)
    args = parser.parse_args()
    what = "compose" if args.compose_only else "compose + SMTP send"
    if args.port:
        spent = asyncio.run(measure(args.port, args.emails, args.compose_only))
        print(f"{what}: {1e6 * spent / args.emails:.1f} µs CPU per email ({args.emails:,} emails; {CHECKOUT})")
        return
    with SmtpSink(ensure_smtp_sink(), lifetime_seconds=3600) as sink:
        if args.callgrind:
            few, many = (instructions(sink.port, n, args.compose_only) for n in CALLGRIND_EMAILS)
            per_email = (many - few) / (CALLGRIND_EMAILS[1] - CALLGRIND_EMAILS[0])
            print(f"{what}: {per_email:,.0f} instructions per email in user space ({CHECKOUT})")
        else:
            spent = asyncio.run(measure(sink.port, args.emails, args.compose_only))
            print(f"{what}: {1e6 * spent / args.emails:.1f} µs CPU per email ({args.emails:,} emails; "
                  f"{CHECKOUT})")


if __name__ == "__main__":
    sys.exit(main())
