"""Generic HTTP transport (``kind=http``): POST a JSON document of the email to an in-house API.

Pure: no I/O. The document::

    {"dedupe_key", "message_id", "from", "to": [...], "cc": [...], "bcc": [...], "reply_to",
     "subject", "text", "html", "headers": {...},
     "attachments": [{"filename", "content_type", "content_base64"}], "metadata": {...}}

Headers: ``Idempotency-Key`` (the receiver should de-duplicate by it), ``Authorization:
Bearer <api_key>`` when an api_key is set, and when a signing secret is set
``X-Outbox-Timestamp: <unix seconds>`` and ``X-Outbox-Signature: v1=<hex>``, the
HMAC-SHA256 of ``"<timestamp>.<body>"`` over the exact body bytes (see :func:`verify`).

Answers: 2xx sent (``provider_message_id`` from a JSON ``id``); 408 transient; 429 and
503 transient with Retry-After; 401/403 pause the transport; other 4xx permanent;
other 5xx ambiguous. The receiver's key window is unknown to us, so ambiguous outcomes
go through the in_doubt policy.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import datetime
from typing import Any, ClassVar

from ..delivery import Delivery, MessageFields, Outcome
from .provider import ApiRequest, ApiResponse, ProviderOptions, auth_pause, json_body
from .seam import AUTH_PAUSE_SECONDS, one_line, parse_retry_after

TIMESTAMP_HEADER = "X-Outbox-Timestamp"
SIGNATURE_HEADER = "X-Outbox-Signature"
SIGNATURE_VERSION = "v1"


def signature(secret: str | bytes, timestamp: int | str, body: bytes) -> str:
    """``v1=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>``."""
    key = secret.encode("utf-8") if isinstance(secret, str) else secret
    digest = hmac.new(key, str(timestamp).encode("ascii") + b"." + body, hashlib.sha256).hexdigest()
    return f"{SIGNATURE_VERSION}={digest}"


def verify(secret: str | bytes, timestamp: str, body: bytes, signature_header: str, *, now: float,
           tolerance_seconds: float = 300.0) -> bool:
    """What a receiver does: check the signature and that the timestamp is recent (replay protection)."""
    try:
        stamp = int(timestamp)
    except ValueError:
        return False
    if abs(now - stamp) > tolerance_seconds:
        return False
    return hmac.compare_digest(signature(secret, stamp, body), signature_header.strip())


def _error(response: ApiResponse) -> str:
    body = response.json()
    if isinstance(body, dict):
        for name in ("message", "error", "detail"):
            if body.get(name):
                return one_line(str(body[name]))
    return response.text()


class WebhookApi:
    kind: ClassVar[str] = "http"
    default_base_url: ClassVar[str | None] = None  # in-house: the transport's ``url``
    default_rate_per_second: ClassVar[float | None] = None
    idempotency_window_seconds: float | None = None

    def __init__(self, url: str, *, bearer: str | None = None, signing_secret: str | None = None,
                 auth_pause_seconds: float = AUTH_PAUSE_SECONDS) -> None:
        self.url = url
        self._bearer = bearer
        self._secret = signing_secret
        self.auth_pause_seconds = auth_pause_seconds

    @classmethod
    def from_options(cls, options: ProviderOptions) -> WebhookApi:
        return cls(options.base_url, bearer=options.api_key, signing_secret=options.signing_secret,
                   auth_pause_seconds=options.auth_pause_seconds)

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "outbox-mailer"}
        if self._bearer:
            headers["Authorization"] = f"Bearer {self._bearer}"
        return headers

    def build(self, fields: MessageFields, delivery: Delivery, message_id: str, key: str,
              now: datetime) -> ApiRequest:
        document: dict[str, Any] = {
            "dedupe_key": delivery.dedupe_key,
            "message_id": message_id,
            "from": fields.from_address,
            "to": list(fields.to),
            "cc": list(fields.cc),
            "bcc": list(fields.bcc),
            "reply_to": fields.reply_to,
            "subject": fields.subject,
            "text": fields.text,
            "html": fields.html,
            "headers": dict(fields.headers),
            "attachments": [
                {"filename": a.filename, "content_type": a.content_type,
                 "content_base64": base64.b64encode(a.content).decode("ascii")}
                for a in fields.attachments
            ],
            "metadata": delivery.metadata,
        }
        body = json_body(document)
        headers = {**self._headers(), "Content-Type": "application/json", "Idempotency-Key": key}
        if self._secret is not None:
            stamp = int(now.timestamp())
            headers[TIMESTAMP_HEADER] = str(stamp)
            headers[SIGNATURE_HEADER] = signature(self._secret, stamp, body)
        return ApiRequest("POST", self.url, headers, body)

    def interpret(self, response: ApiResponse, delivery: Delivery, now: datetime) -> Outcome:
        status = response.status
        if 200 <= status < 300:
            body = response.json()
            message_id = body.get("id") if isinstance(body, dict) else None
            return Outcome.sent(str(message_id) if message_id not in (None, "") else None, reply_code=status)
        message = _error(response)
        described = f"HTTP {status}: {message}"
        if status in (401, 403):
            return auth_pause(response, message, self.auth_pause_seconds)
        if status in (429, 503):
            return Outcome.transient(described, reply_code=status,
                                     retry_after_seconds=parse_retry_after(response.header("retry-after"), now))
        if status == 408:
            return Outcome.transient(described, reply_code=status)
        if 400 <= status < 500:
            return Outcome.permanent(described, reply_code=status)
        if status >= 500:
            return Outcome.ambiguous(f"{described}; the receiver may have accepted the message", reply_code=status)
        return Outcome.transient(f"unexpected answer {described}", reply_code=status)

    def check_request(self) -> ApiRequest:
        return ApiRequest("HEAD", self.url, self._headers())
