"""Resend (https://resend.com): ``POST /emails`` with an ``Idempotency-Key``. Pure: no I/O.

Resend keeps an idempotency key for 24 h: a repeat with the same payload returns the
first response and sends nothing, so an ambiguous outcome (5xx, timeout, lost
connection) is safe to resend with the same key inside that window.

Answers:

===========================================  ===========================================
200 ``{"id"}``                               sent, ``provider_message_id`` = id
400, 422 (and other 4xx)                     permanent
409 ``concurrent_idempotent_requests``       transient, retry in 1 s (same key)
409 ``invalid_idempotent_request``           permanent (same key, other payload)
429 ``rate_limit_exceeded``                  transient, Retry-After honoured
429 ``daily_quota_exceeded``                 pause until Retry-After or the next UTC midnight
429 ``monthly_quota_exceeded``               pause until Retry-After or 24 h
401, 403                                     pause (credentials refused), not charged
5xx                                          ambiguous, safe to resend inside the key window
===========================================  ===========================================
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from ...delivery import Delivery, MessageFields, Outcome
from ..seam import one_line, parse_retry_after, resend_safe_until
from .provider import (
    ApiRequest,
    ApiResponse,
    KeyedApi,
    attachment_documents,
    auth_pause,
    seconds_until_utc_midnight,
    sent_with_id,
)

IDEMPOTENCY_WINDOW_SECONDS = 86_400.0
CONCURRENT_RETRY_SECONDS = 1.0
MONTHLY_QUOTA_PAUSE_SECONDS = 86_400.0
_TAG = re.compile(r"[A-Za-z0-9_-]{1,256}")


def tags(metadata: dict[str, Any]) -> list[dict[str, str]]:
    """Metadata entries that Resend accepts as tags (ASCII letters, digits, ``_``, ``-``); others skipped."""
    out = []
    for name, value in metadata.items():
        if value is None:
            continue
        text = str(value)
        if _TAG.fullmatch(str(name)) and _TAG.fullmatch(text):
            out.append({"name": str(name), "value": text})
    return out


def _error(response: ApiResponse) -> tuple[str, str]:
    """(name, message) of a Resend error body."""
    body = response.json()
    if isinstance(body, dict):
        name = str(body.get("name") or "")
        message = one_line(str(body.get("message") or body.get("error") or ""))
        return name, message or name or response.text()
    return "", response.text()


class ResendApi(KeyedApi):
    kind = "resend"
    default_base_url = "https://api.resend.com"
    default_rate_per_second = 2.0  # Resend's default team limit
    idempotency_window_seconds: float | None = IDEMPOTENCY_WINDOW_SECONDS

    def build(self, fields: MessageFields, delivery: Delivery, message_id: str, key: str,
              now: datetime) -> ApiRequest:
        document: dict[str, Any] = {
            "from": fields.from_address,
            "to": list(fields.to),
            "subject": fields.subject,
        }
        if fields.cc:
            document["cc"] = list(fields.cc)
        if fields.bcc:
            document["bcc"] = list(fields.bcc)
        if fields.reply_to is not None:
            document["reply_to"] = fields.reply_to
        if fields.text is not None:
            document["text"] = fields.text
        if fields.html is not None:
            document["html"] = fields.html
        if fields.headers:
            document["headers"] = dict(fields.headers)
        if fields.attachments:
            document["attachments"] = attachment_documents(fields, "filename", "content", "content_type")
        row_tags = tags(delivery.metadata)
        if row_tags:
            document["tags"] = row_tags
        return self._post_json("/emails", document, **{"Idempotency-Key": key})

    def interpret(self, response: ApiResponse, delivery: Delivery, now: datetime) -> Outcome:
        status = response.status
        if 200 <= status < 300:
            return sent_with_id(response, "id")
        name, message = _error(response)
        described = f"HTTP {status} {name}: {message}" if name else f"HTTP {status}: {message}"
        if status in (401, 403):
            return auth_pause(response, f"{name}: {message}" if name else message, self.auth_pause_seconds)
        if status == 409:
            if name == "concurrent_idempotent_requests":
                return Outcome.transient(described, reply_code=status, retry_after_seconds=CONCURRENT_RETRY_SECONDS)
            return Outcome.permanent(described, reply_code=status)
        if status == 429:
            retry_after = parse_retry_after(response.header("retry-after"), now)
            if "quota" in name:
                if retry_after is not None:
                    pause = retry_after
                elif "daily" in name:
                    pause = seconds_until_utc_midnight(now)
                else:
                    pause = MONTHLY_QUOTA_PAUSE_SECONDS
                pause = max(pause, 1.0)
                return Outcome.paused(f"{described}; transport paused for {pause:.0f} s", pause, reply_code=status)
            return Outcome.transient(described, reply_code=status, retry_after_seconds=retry_after)
        if 400 <= status < 500:
            return Outcome.permanent(described, reply_code=status)
        if status >= 500:
            return Outcome.ambiguous(
                f"{described}; Resend may have accepted the message (a resend with the same "
                "idempotency key is absorbed)",
                reply_code=status, resend_safe_until=resend_safe_until(delivery, self.idempotency_window_seconds),
            )
        return Outcome.transient(f"unexpected answer {described}", reply_code=status)

    def check_request(self) -> ApiRequest:
        return ApiRequest("GET", f"{self.base_url}/domains", self._headers())
