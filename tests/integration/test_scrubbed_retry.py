"""An email whose content retention removed (prune's scrub: bodies, attachments, headers) cannot be sent
again: `retry KEY`, the bulk retry and the console refuse it with a message that says why, and leave the
row as it was, instead of sending the customer a subject with an empty body."""

from __future__ import annotations

import html
import re

import pytest

from outbox_mailer.errors import InvalidTransition
from tests.console_harness import Client
from tests.integration.conftest import cli, insert
from tests.integration.test_console_pages import set_status
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio

MONTH = 30 * 86_400


async def failed_rows(store: SqlStore, *, scrubbed: list[str], kept: list[str]) -> None:
    """Failed rows 40 days old; prune's own scrub removes the content of those in ``scrubbed``."""
    for key in scrubbed + kept:
        await insert(store, key, attachments=[{"filename": "a.txt", "content_type": "text/plain",
                                               "content_base64": "aGk="}])
        await set_status(store, key, "failed", last_error="550 mailbox full")
    await store.execute("UPDATE email_deliveries SET created_at = now() - interval '40 days', "
                        "updated_at = now() - interval '40 days' WHERE dedupe_key = ANY($1)", scrubbed)
    assert await store.scrub_batch(MONTH, 100) == len(scrubbed)
    await store.execute("UPDATE email_deliveries SET updated_at = now() - interval '40 days' "
                        "WHERE dedupe_key = ANY($1)", kept)


async def statuses(store: SqlStore) -> dict[str, str]:
    return {r["dedupe_key"]: r["status"] for r in await store.fetch("SELECT dedupe_key, status FROM email_deliveries")}


async def test_retry_of_a_row_whose_content_was_scrubbed_is_refused_and_says_why(store: SqlStore) -> None:
    await failed_rows(store, scrubbed=["gone"], kept=[])
    with pytest.raises(InvalidTransition) as refused:
        await store.retry("gone", 3)
    assert "retention removed its content" in str(refused.value)
    assert await statuses(store) == {"gone": "failed"}


async def test_the_cli_refuses_retry_key_and_leaves_scrubbed_rows_out_of_a_bulk_retry(
        store: SqlStore, db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    await failed_rows(store, scrubbed=["gone-1", "gone-2"], kept=["kept"])
    monkeypatch.setenv("OUTBOX_MAILER_DATABASE_URL", db_url)

    assert await cli("retry", "gone-1") == 1
    err = capsys.readouterr().err
    assert "'gone-1' is failed" in err and "retention removed its content" in err

    assert await cli("retry", "--status", "failed", "--since", "60d", "--yes") == 0
    out, err = capsys.readouterr()
    assert "requeued 1 emails" in out
    assert "2 failed emails whose content retention removed cannot be retried" in err
    assert await statuses(store) == {"gone-1": "failed", "gone-2": "failed", "kept": "pending"}

    assert await cli("retry", "--status", "failed", "--since", "60d", "--yes") == 1
    assert "2 failed emails whose content retention removed cannot be retried" in capsys.readouterr().err


async def test_the_console_refuses_a_scrubbed_row_and_leaves_it_out_of_a_bulk_retry(
        operator: Client, store: SqlStore) -> None:
    await failed_rows(store, scrubbed=["gone"], kept=["kept"])

    refused = await operator.post("/emails/gone/retry")
    assert refused.status_code == 409 and "retention removed its content" in html.unescape(refused.text)

    confirm = await operator.get("/emails?status=failed&bulk=retry")
    assert "Retry 1 emails?" in confirm.text and "Emails whose content retention removed are not counted" in confirm.text
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', confirm.text))
    done = await operator.post("/emails/bulk-retry", {k: html.unescape(v) for k, v in fields.items()})
    assert done.status_code == 200 and "Requeued 1 emails" in done.text
    assert await statuses(store) == {"gone": "failed", "kept": "pending"}
