"""Postmark (https://postmarkapp.com): ``POST /email``. Pure: no I/O.

Postmark has no idempotency key: a 5xx or a timeout leaves the outcome unknown, and
the ambiguous-outcome policy (``OUTBOX_MAILER_IN_DOUBT``) decides whether to resend
(a possible duplicate) or hold the row for an operator.

Answers:

=================================================  ================================
200 ``{"MessageID"}``                              sent
401, 403, or ``ErrorCode`` 10 (bad server token)   pause (credentials refused), not charged
422 ``ErrorCode`` 405 (not allowed to send)        pause (account out of credits), not charged
422 ``ErrorCode`` 429 (rate limit)                 transient
422 other ``ErrorCode`` (406 inactive recipient,   permanent
300 invalid request, ...), other 4xx
429                                                transient, Retry-After honoured
5xx                                                ambiguous (the in_doubt policy decides)
=================================================  ================================
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ...delivery import Delivery, MessageFields, Outcome
from ..seam import one_line, parse_retry_after
from .provider import (
    ApiRequest,
    ApiResponse,
    KeyedApi,
    attachment_documents,
    auth_pause,
    sent_with_id,
    string_values,
)

ERROR_BAD_TOKEN = 10
ERROR_INVALID_REQUEST = 300
ERROR_NOT_ALLOWED_TO_SEND = 405
ERROR_INACTIVE_RECIPIENT = 406
ERROR_RATE_LIMIT = 429


def _error(response: ApiResponse) -> tuple[int | None, str]:
    body = response.json()
    if isinstance(body, dict):
        code = body.get("ErrorCode")
        message = one_line(str(body.get("Message") or ""))
        return (code if isinstance(code, int) else None), message or response.text()
    return None, response.text()


class PostmarkApi(KeyedApi):
    kind = "postmark"
    default_base_url = "https://api.postmarkapp.com"
    idempotency_window_seconds: float | None = None

    def _auth_header(self) -> dict[str, str]:
        return {"X-Postmark-Server-Token": self._key}

    def build(self, fields: MessageFields, delivery: Delivery, message_id: str, key: str,
              now: datetime) -> ApiRequest:
        document: dict[str, Any] = {"From": fields.from_address, "To": ", ".join(fields.to),
                                    "Subject": fields.subject}
        if fields.cc:
            document["Cc"] = ", ".join(fields.cc)
        if fields.bcc:
            document["Bcc"] = ", ".join(fields.bcc)
        if fields.text is not None:
            document["TextBody"] = fields.text
        if fields.html is not None:
            document["HtmlBody"] = fields.html
        if fields.reply_to is not None:
            document["ReplyTo"] = fields.reply_to
        # Our Message-ID goes along so that a repeat after an ambiguous outcome can be recognised.
        document["Headers"] = [{"Name": "Message-ID", "Value": message_id}] + [
            {"Name": name, "Value": value} for name, value in fields.headers
        ]
        if fields.attachments:
            document["Attachments"] = attachment_documents(fields, "Name", "Content", "ContentType")
        metadata = string_values(delivery.metadata)
        if metadata:
            document["Metadata"] = metadata
        return self._post_json("/email", document)

    def interpret(self, response: ApiResponse, delivery: Delivery, now: datetime) -> Outcome:
        status = response.status
        if 200 <= status < 300:
            return sent_with_id(response, "MessageID")
        code, message = _error(response)
        described = f"HTTP {status} ErrorCode {code}: {message}" if code is not None else f"HTTP {status}: {message}"
        if status in (401, 403) or code == ERROR_BAD_TOKEN:
            return auth_pause(response, message, self.auth_pause_seconds)
        if status == 429:
            return Outcome.transient(described, reply_code=status,
                                     retry_after_seconds=parse_retry_after(response.header("retry-after"), now))
        if 400 <= status < 500:
            if code == ERROR_RATE_LIMIT:
                return Outcome.transient(described, reply_code=status,
                                         retry_after_seconds=parse_retry_after(response.header("retry-after"), now))
            if code == ERROR_NOT_ALLOWED_TO_SEND:
                return Outcome.paused(f"{described}; transport paused for {self.auth_pause_seconds:g} s",
                                      self.auth_pause_seconds, reply_code=status)
            return Outcome.permanent(described, reply_code=status)
        if status >= 500:
            return Outcome.ambiguous(f"{described}; Postmark may have accepted the message (no idempotency key)",
                                     reply_code=status)
        return Outcome.transient(f"unexpected answer {described}", reply_code=status)

    def check_request(self) -> ApiRequest:
        return ApiRequest("GET", f"{self.base_url}/server", self._headers())
