"""What may be printed of a value that can hold a secret."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def redacted_url(url: str) -> str:
    """``url`` without its credentials: ``user:**********@host`` when it has a password (the user
    name helps; a DSN), ``***@host`` when the user part alone is the secret (an API token)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    if parts.password is not None:
        return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:**********@{host}"))
    return urlunsplit(parts._replace(netloc=f"***@{host}"))
