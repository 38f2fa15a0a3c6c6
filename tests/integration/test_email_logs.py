"""A real run's log lines about each email: one per retry and per final outcome, with the email's fields as
top-level keys of the JSON lines (time, level, logger and message left as the record's own), one short readable
line each in text mode, and a progress summary once the daemon has nothing left in flight."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from outbox_mailer.serving.logs import LogFormat, make_formatter
from outbox_mailer.store import Store
from tests.integration.conftest import abandon_at_shutdown, insert
from tests.smtp_server import SmtpTestServer

pytestmark = pytest.mark.anyio

KEYS = ("log-ok", "log-grey", "log-gone")


class Captured:
    """What the daemon's logger writes through the project's formatter, as lines of text."""

    def __init__(self, log_format: LogFormat) -> None:
        self.stream = io.StringIO()
        self.handler = logging.StreamHandler(self.stream)
        self.handler.setFormatter(make_formatter(log_format, journal=False))

    def lines(self) -> list[str]:
        return self.stream.getvalue().splitlines()


@pytest.fixture
def captured(request: pytest.FixtureRequest) -> Iterator[Captured]:
    cap = Captured(request.param)
    logger = logging.getLogger("outbox_mailer")
    level = logger.level
    logger.addHandler(cap.handler)
    logger.setLevel(logging.INFO)
    yield cap
    logger.removeHandler(cap.handler)
    logger.setLevel(level)


async def send_three(running: Any, store: Store, smtp_server: SmtpTestServer,
                     done: Any) -> dict[str, dict[str, Any]]:
    """One email sent at once, one greylisted once then sent, one refused for good; returns the rows once
    ``done()`` says the log has what the test waits for."""
    smtp_server.fail("RCPT", "451 4.7.1 greylisted", address="grey@example.com", times=1)
    smtp_server.fail("RCPT", "550 5.1.1 no such user", address="gone@example.com")
    smtp_server.fail("DATA", "250 2.0.0 Ok: queued as 4XYZ9")
    for key, to in zip(KEYS, ("ok@example.com", "grey@example.com", "gone@example.com"), strict=True):
        await insert(store, key, to_addresses=[to])
    r = await running()
    rows = await r.final(*KEYS)
    with anyio.move_on_after(10):  # then the assertions say what is missing
        while not done():
            await anyio.sleep(0.02)
    return rows


@pytest.mark.parametrize("captured", ["json"], indirect=True)
async def test_json_lines_carry_each_emails_fields_as_top_level_keys(
        running: Any, store: Store, smtp_server: SmtpTestServer, captured: Captured) -> None:
    def parsed() -> list[dict[str, Any]]:
        return [json.loads(line) for line in captured.lines()]

    def about(key: str) -> list[dict[str, Any]]:
        return [d for d in parsed() if d.get("dedupe_key") == key]

    rows = await send_three(running, store, smtp_server, lambda: (
        len(about("log-ok")) == 1 and len(about("log-grey")) == 2 and len(about("log-gone")) == 1
        and any(d["message"].startswith("recorded ") for d in parsed())))
    assert not [d for d in parsed() if d["message"].startswith("recorded ") and "dedupe_key" in d]
    assert rows["log-grey"]["attempts"] == 2 and rows["log-gone"]["status"] == "failed"
    assert {key: [d.get("outcome") for d in about(key)] for key in KEYS} == {
        "log-ok": ["sent"], "log-grey": ["retried", "sent"], "log-gone": ["failed"]}
    for key in KEYS:
        for d in about(key):
            assert {"time", "level", "logger", "message", "dedupe_key", "transport", "attempt", "outcome",
                    "reply_code", "duration_ms"} <= d.keys(), d
            assert d["transport"] == "smtp" and d["logger"] == "outbox_mailer" and d["duration_ms"] >= 0
            assert key in d["message"], "the message reads on its own too"
    [ok] = about("log-ok")
    assert (ok["level"], ok["outcome"], ok["attempt"], ok["reply_code"], ok["provider_message_id"]) == (
        "INFO", "sent", 1, 250, "4XYZ9")
    assert ok["provider_message_id"] == rows["log-ok"]["provider_message_id"], "the recorded truth"
    retry, sent = about("log-grey")
    assert (retry["level"], retry["outcome"], retry["attempt"], retry["reply_code"]) == ("INFO", "retried", 1, 451)
    assert "retry_at" in retry and "provider_message_id" not in retry
    assert (sent["outcome"], sent["attempt"], sent["reply_code"]) == ("sent", 2, 250)
    [gone] = about("log-gone")
    assert (gone["level"], gone["outcome"], gone["attempt"], gone["reply_code"]) == ("WARNING", "failed", 1, 550)
    assert "550 5.1.1" in gone["error"]
    assert not any(d.get("rescue") for d in parsed()), "no rescue in this run"


@pytest.mark.parametrize("captured", ["text"], indirect=True)
async def test_text_lines_read_as_one_short_line_per_outcome(
        running: Any, store: Store, smtp_server: SmtpTestServer, captured: Captured) -> None:
    def about(key: str) -> list[str]:
        return [line.split(": ", 1)[1] for line in captured.lines() if f"key={key} " in line]

    def summed() -> dict[str, int]:
        """The counts of every summary line so far, added up."""
        total: dict[str, int] = {}
        for line in captured.lines():
            if " recorded " in line:
                for name, n in re.findall(r"(\w+)=(\d+)", line.split(" recorded ", 1)[1]):
                    total[name] = total.get(name, 0) + int(n)
        return total

    await send_three(running, store, smtp_server, lambda: (
        len(about("log-ok")) == 1 and len(about("log-grey")) == 2 and len(about("log-gone")) == 1
        and summed().get("sent") == 2))
    assert {key: [line.split()[0] for line in about(key)] for key in KEYS} == {
        "log-ok": ["sent"], "log-grey": ["retried", "sent"], "log-gone": ["failed"]}
    ms = r"\d+ ms"
    assert re.fullmatch(rf"sent key=log-ok via smtp attempt 1 250 id=4XYZ9 {ms}", about("log-ok")[0])
    retry, sent = about("log-grey")
    assert re.fullmatch(rf"retried key=log-grey via smtp attempt 1 451 {ms}, retry in [\d.]+ s: .*451 4\.7\.1 .*",
                        retry)
    assert re.fullmatch(rf"sent key=log-grey via smtp attempt 2 250 id=4XYZ9 {ms}", sent)
    assert re.fullmatch(rf"failed key=log-gone via smtp attempt 1 550 {ms}: .*550 5\.1\.1.*", about("log-gone")[0])
    assert summed() == {"sent": 2, "failed": 1, "retried": 1, "in_doubt": 0, "claim_lost": 0}, (
        "summed up as the daemon drains, not a period later")


@pytest.mark.parametrize("captured", ["json"], indirect=True)
async def test_a_send_abandoned_at_shutdown_and_its_rescue_say_so_in_their_fields(
        running: Any, store: Store, smtp_server: SmtpTestServer, captured: Captured) -> None:
    await abandon_at_shutdown(running, store, smtp_server, "log-stuck")
    smtp_server.clear_faults()
    await store.execute("UPDATE email_deliveries SET claimed_at = now() - interval '1 hour'")  # a dead claim
    later = await running(rescue_interval_seconds=0.1)
    assert (await later.final("log-stuck"))["log-stuck"]["status"] == "sent"

    def about() -> list[dict[str, Any]]:
        return [d for d in map(json.loads, captured.lines()) if d.get("dedupe_key") == "log-stuck"]

    with anyio.move_on_after(10):
        while [d["outcome"] for d in about()][-1:] != ["sent"]:
            await anyio.sleep(0.02)
    assert [(d["outcome"], d["attempt"], d["transport"], d.get("rescue")) for d in about()] == [
        ("abandoned", 1, "smtp", None), ("retried", 1, "smtp", True), ("sent", 2, "smtp", None)]
    abandoned, rescued, _ = about()
    assert abandoned["level"] == "WARNING" and "duration_ms" not in rescued, "a rescue times no send"
