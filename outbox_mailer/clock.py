"""The wall clock, in one place: every decision takes ``now`` as a parameter, and this is where it comes from."""

from __future__ import annotations

from datetime import UTC, datetime


def utc_now() -> datetime:
    return datetime.now(UTC)
