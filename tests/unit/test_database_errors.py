"""translate_errors(): what reaches the operator when the database fails, by kind."""

from __future__ import annotations

import pytest

from outbox_mailer.errors import DatabaseUnavailable
from outbox_mailer.store.connection import translate_errors


@pytest.mark.parametrize(("raised", "message"), [
    (TimeoutError(), "database unavailable: no answer in time (TimeoutError)"),  # asyncpg's timeouts say nothing
    (ConnectionRefusedError(111, "Connection refused"), "database unavailable: [Errno 111] Connection refused"),
    (OSError(), "database unavailable: OSError"),
])
def test_an_unavailable_database_is_always_described(raised: Exception, message: str) -> None:
    with pytest.raises(DatabaseUnavailable) as info, translate_errors():
        raise raised
    assert str(info.value) == message
