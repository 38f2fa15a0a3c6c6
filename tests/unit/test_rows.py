"""Decoding claimed rows one at a time: a value no decoder handles fails that row alone."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from outbox_mailer.store.rows import delivery_from_row, instant_or_none

LIMIT = 1_000_000


def record(**kw: Any) -> dict[str, Any]:
    base = {
        "id": 7, "dedupe_key": "k", "claim_token": uuid.uuid4(), "attempts": 1, "max_attempts": None,
        "transport": None, "priority": 0, "scheduled_at": 1.7e9, "expires_at": None, "created_at": 1.7e9,
        "first_attempt_at": 1.7e9, "content_bytes": 10, "retry_recipients": None, "screen_suppressions": False, "from_address": None,
        "to_addresses": ["a@example.com"], "cc_addresses": [], "bcc_addresses": [], "reply_to": None,
        "subject": "s", "text_body": "b", "html_body": None, "headers": "{}", "attachments": "[]",
        "metadata": "{}", "message_id": "<0662a1b2c3d4e5f6a7b8c9d0e1f2a3b4@example.com>", "pinned_transport": None, "traceparent": None,
    }
    return {**base, **kw}


def test_a_plain_row_decodes() -> None:
    d = delivery_from_row(record(metadata='{"a": 1}', retry_recipients=["b@example.com"]), LIMIT)
    assert d.defect is None and d.metadata == {"a": 1} and d.retry_recipients == ("b@example.com",)
    assert d.scheduled_at.year == 2023 and d.expires_at is None
    assert d.message_id == "<0662a1b2c3d4e5f6a7b8c9d0e1f2a3b4@example.com>"


def test_infinite_expiry_means_never() -> None:
    assert delivery_from_row(record(expires_at=float("inf")), LIMIT).expires_at is None


@pytest.mark.parametrize(("field", "value"), [
    ("expires_at", 253402300800.0),  # 10000-01-01
    ("scheduled_at", -63517824000.0),  # 44 BC
    ("scheduled_at", float("inf")),
    ("expires_at", float("-inf")),
    ("created_at", 1e20),
    ("first_attempt_at", float("nan")),
])
def test_timestamps_out_of_range_name_the_field(field: str, value: float) -> None:
    d = delivery_from_row(record(**{field: value}), LIMIT)
    assert d.defect is not None and d.defect.startswith(field + ":"), d.defect
    assert d.id == 7 and d.attempts == 1


@pytest.mark.parametrize(("field", "text"), [
    ("metadata", '{"a": ' + "[" * 5000 + "]" * 5000 + "}"),
    ("headers", '{"X": ' + "[" * 5000 + "]" * 5000 + "}"),
    ("attachments", "[" * 5000 + "]" * 5000),
    ("metadata", '{"n": ' + "7" * 5000 + "}"),
    ("metadata", "[]"),
    ("attachments", "{}"),
])
def test_json_no_decoder_handles_names_the_field(field: str, text: str) -> None:
    d = delivery_from_row(record(**{field: text}), LIMIT)
    assert d.defect is not None and d.defect.startswith(field + ":"), d.defect


def test_content_left_out_by_the_claim_is_a_defect_with_its_size() -> None:
    d = delivery_from_row(record(content_bytes=52_428_800, **dict.fromkeys(
        ("subject", "text_body", "headers", "attachments", "metadata", "to_addresses", "cc_addresses",
         "bcc_addresses"))), LIMIT)
    assert d.defect == f"content: 52428800 bytes, over the limit of {LIMIT} (max_message_bytes); not loaded"


def test_next_due_at_of_an_unrepresentable_time_is_none() -> None:
    assert instant_or_none(None) is None and instant_or_none(float("inf")) is None
    assert instant_or_none(1e20) is None
    assert instant_or_none(0.0) is not None and json.dumps(instant_or_none(0.0).isoformat())
