"""What the CLI says when the thing a command names does not exist: one plain sentence, exit 1."""

from __future__ import annotations

import pytest

from tests.integration.conftest import cli

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(("args", "message"), [
    (("events", "nonexistent"), "no email with dedupe key 'nonexistent'"),
    (("unsuppress", "nobody@example.com"), "nobody@example.com is not suppressed"),
    (("console-user", "remove", "nobody"), "no console user 'nobody'"),
])
async def test_a_missing_key_address_or_user_is_named_once_in_a_plain_sentence(
        args: tuple[str, ...], message: str, db_url: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OUTBOX_MAILER_DATABASE_URL", db_url)
    assert await cli(*args) == 1
    assert capsys.readouterr().err == f"outbox-mailer: {message}\n"
