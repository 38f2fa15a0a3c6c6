"""URLs printed without their credentials."""

from __future__ import annotations

import pytest

from outbox_mailer.redaction import redacted_url


@pytest.mark.parametrize(("url", "printed"), [
    ("postgresql://mailer:s3cret@db:5432/app", "postgresql://mailer:**********@db:5432/app"),
    ("https://tok3n@api.example.com/emails", "https://***@api.example.com/emails"),
    ("https://api.example.com/emails", "https://api.example.com/emails"),
    ("postgresql://:p@ss@db/app", "postgresql://:**********@db/app"),
])
def test_credentials_never_printed(url: str, printed: str) -> None:
    assert redacted_url(url) == printed
    assert "s3cret" not in redacted_url(url) and "tok3n" not in redacted_url(url)
