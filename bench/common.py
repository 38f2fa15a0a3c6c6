"""Shared helpers for the benchmark: rows, processes, statistics, machine facts.

Imported by bench/run.py and by the worker scripts it starts (each worker is a
separate OS process, so one measurement never shares an event loop or a
garbage collector with another).
"""

from __future__ import annotations

import json
import math
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import time
from email.message import EmailMessage
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_FROM = "Example Shop <noreply@example.com>"


def daemon_defaults() -> str:
    """The daemon's default SMTP pool and concurrency, as its settings give them (for the defaults' labels)."""
    from outbox_mailer.settings.config import Settings
    from outbox_mailer.settings.transports import SmtpSettings
    pool = SmtpSettings.model_fields["pool_size"].default
    return f"pool {pool}, concurrency {Settings.model_fields['concurrency'].default}"

# A realistic transactional email: one named recipient, a subject, a short text
# body and a short HTML body (~0.4 KB + ~0.9 KB), metadata for the app.
TEXT_BODY = (
    "Hello Customer {n},\n\n"
    "Good news: your order #{n} has shipped and should arrive within 3 business days.\n"
    "Track it at https://shop.example.com/orders/{n}/tracking\n\n"
    "Items: 1 x Blue mug, 2 x Espresso beans (250 g)\n"
    "Total: EUR 34.90\n\n"
    "Thank you for shopping with us.\n-- The Example Shop team\n"
)
HTML_BODY = (
    "<!doctype html><html><body style=\"font-family:sans-serif\">"
    "<p>Hello Customer {n},</p>"
    "<p>Good news: your order <b>#{n}</b> has shipped and should arrive within 3 business days.</p>"
    "<p><a href=\"https://shop.example.com/orders/{n}/tracking\">Track your parcel</a></p>"
    "<table><tr><td>1 x Blue mug</td><td>EUR 12.90</td></tr>"
    "<tr><td>2 x Espresso beans (250 g)</td><td>EUR 22.00</td></tr>"
    "<tr><td><b>Total</b></td><td><b>EUR 34.90</b></td></tr></table>"
    "<p>Thank you for shopping with us.<br>-- The Example Shop team</p>"
    "</body></html>"
)


def _sql_template(text: str) -> str:
    """The body template as a SQL expression of the series value g."""
    parts = text.split("{n}")
    quoted = ["'" + p.replace("'", "''") + "'" for p in parts]
    return " || g::text || ".join(quoted)


# $1: key prefix, $2: first number, $3: how many; $4: status ('pending' or 'sent').
INSERT_ROWS_SQL = f"""
INSERT INTO email_deliveries (dedupe_key, status, sent_at, attempts, to_addresses, subject,
                              text_body, html_body, metadata)
SELECT $1 || g::text, $4::text, CASE WHEN $4::text = 'sent' THEN now() END,
       CASE WHEN $4::text = 'sent' THEN 1 ELSE 0 END,
       ARRAY['Customer ' || g::text || ' <customer' || g::text || '@example.com>'],
       'Your order #' || g::text || ' has shipped',
       {_sql_template(TEXT_BODY)},
       {_sql_template(HTML_BODY)},
       jsonb_build_object('order_id', g, 'kind', 'shipping')
FROM generate_series($2::bigint, $2::bigint + $3::bigint - 1) AS g
"""


def email_payload(n: int) -> dict[str, object]:
    """The same email as a job payload (for the hand-written PgQueuer worker)."""
    return {
        "to": f"Customer {n} <customer{n}@example.com>",
        "subject": f"Your order #{n} has shipped",
        "text": TEXT_BODY.replace("{n}", str(n)),
        "html": HTML_BODY.replace("{n}", str(n)),
        "message_id": f"<bench-{n}@example.com>",
    }


def email_message(data: dict[str, object]) -> EmailMessage:
    """The email of a payload built the way a hand-written worker does: EmailMessage, text + HTML."""
    msg = EmailMessage()
    msg["From"] = DEFAULT_FROM
    msg["To"] = data["to"]
    msg["Subject"] = data["subject"]
    msg["Message-ID"] = data["message_id"]
    msg.set_content(data["text"])
    msg.add_alternative(data["html"], subtype="html")
    return msg


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout:g} s")


def peak_rss_mb() -> float:
    """This process's peak resident set size (VmHWM), in MB."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_seconds(pid: int, *, tree: bool = False) -> float:
    """User + system CPU time a process has used so far (0 if it is gone).

    With ``tree``: also its children's, live ones and those it has reaped
    (PostgreSQL's postmaster reaps every backend that ends).
    """
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    total = ticks / os.sysconf("SC_CLK_TCK")
    if tree:
        total += (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            children = []
        total += sum(cpu_seconds(int(child), tree=True) for child in children)
    return total


def rss_mb(pid: int) -> tuple[float, float]:
    """(current RSS, peak RSS) of a process, in MB."""
    cur = peak = 0.0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                cur = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024
    except OSError:
        pass
    return cur, peak


def emit_result(data: dict[str, object]) -> None:
    """A worker's result: one JSON line on stdout, prefixed so logs cannot be mistaken for it."""
    print("RESULT " + json.dumps(data), flush=True)


def parse_result(stdout: str) -> dict[str, object]:
    for line in reversed(stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"worker printed no result; output:\n{stdout[-3000:]}")


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values (q in 0..100)."""
    if not sorted_values:
        return float("nan")
    k = max(0, min(len(sorted_values) - 1, math.ceil(q / 100 * len(sorted_values)) - 1))
    return sorted_values[k]


def machine_info(pg_version: str) -> dict[str, str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.0f} GiB"
    except OSError:
        pass
    versions = {}
    for mod in ("asyncpg", "aiosmtplib", "anyio", "pgqueuer", "django-post_office", "django"):
        try:
            from importlib.metadata import version

            versions[mod] = version(mod)
        except Exception:  # noqa: BLE001
            versions[mod] = "?"
    try:
        sink = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "postfix"], capture_output=True, text=True,
                              timeout=10, check=False).stdout.strip() or "?"
    except OSError:
        sink = "?"
    return {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "memory": mem,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "postgresql": pg_version,
        "libraries": ", ".join(f"{k} {v}" for k, v in versions.items()) + f", postfix smtp-sink {sink}",
    }
