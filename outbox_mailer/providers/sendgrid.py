"""SendGrid (https://sendgrid.com): ``POST /v3/mail/send``. Pure: no I/O.

SendGrid has no idempotency key: a 5xx or a timeout leaves the outcome unknown, and
the ambiguous-outcome policy (``OUTBOX_MAILER_IN_DOUBT``) decides.

Answers:

=============================  ==================================================
202 (any 2xx)                  sent, ``provider_message_id`` = ``X-Message-Id``
401, 403                       pause (credentials refused), not charged
429                            transient, Retry-After or ``X-RateLimit-Reset`` honoured
400, 413, other 4xx            permanent
5xx                            ambiguous (the in_doubt policy decides)
=============================  ==================================================

A row that names a dynamic template (``provider_template``, ``d-...``) is sent with ``template_id`` and the
row's ``template_data`` as ``dynamic_template_data`` of its personalization (``{}`` without one), and no
``subject`` nor ``content``: the template gives both.

Every message carries ``custom_args: {"dedupe_key": <the row's key>}`` beside the metadata (unless that
would pass SendGrid's 10,000 bytes, see :func:`with_dedupe_key`), which the Event Webhook echoes in each
event (see :mod:`outbox_mailer.delivery_events.sendgrid`).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, ClassVar

from ..delivery import Delivery, MessageFields, Outcome
from .provider import (
    ApiRequest,
    ApiResponse,
    KeyedApi,
    attachment_documents,
    auth_pause,
    split_address,
    string_values,
)
from .seam import one_line, parse_retry_after

CUSTOM_ARGS_BYTES = 10_000


def mailbox(display: str) -> dict[str, str]:
    name, address = split_address(display)
    return {"email": address, "name": name} if name else {"email": address}


def _error(response: ApiResponse) -> str:
    body = response.json()
    if isinstance(body, dict) and isinstance(body.get("errors"), list):
        parts = []
        for err in body["errors"]:
            if isinstance(err, dict):
                where = f"{err['field']}: " if err.get("field") else ""
                parts.append(f"{where}{err.get('message') or ''}")
        if parts:
            return one_line("; ".join(parts))
    return response.text()


def with_dedupe_key(custom_args: dict[str, str], dedupe_key: str) -> dict[str, str]:
    """The metadata's custom args plus ``dedupe_key``, which the Event Webhook echoes in every event
    (:mod:`outbox_mailer.delivery_events.sendgrid` matches rows by it).

    A metadata key of that name is dropped, ours or not: an event must never carry another row's key.
    SendGrid takes at most 10,000 bytes of custom args (SendGrid, "Unique Arguments"): when the key
    would push metadata over that, it is left out, so a message SendGrid took before is not refused now
    (its row is then matched by X-Message-Id alone).
    """
    others = {name: value for name, value in custom_args.items() if name != "dedupe_key"}
    args = {**others, "dedupe_key": dedupe_key}
    if len(json.dumps(args, ensure_ascii=False, separators=(",", ":")).encode("utf-8")) > CUSTOM_ARGS_BYTES:
        return others
    return args


def retry_after(response: ApiResponse, now: datetime) -> float | None:
    """Retry-After, else ``X-RateLimit-Reset`` (a Unix time) as seconds from now."""
    seconds = parse_retry_after(response.header("retry-after"), now)
    if seconds is not None:
        return seconds
    reset = response.header("x-ratelimit-reset")
    try:
        return max(0.0, float(reset) - now.timestamp()) if reset else None
    except ValueError:
        return None


class SendGridApi(KeyedApi):
    kind: ClassVar[str] = "sendgrid"
    default_base_url: ClassVar[str | None] = "https://api.sendgrid.com"
    idempotency_window_seconds: float | None = None

    def build(self, fields: MessageFields, delivery: Delivery, message_id: str, key: str,
              now: datetime) -> ApiRequest:
        personalization: dict[str, Any] = {"to": [mailbox(a) for a in fields.to]}
        if fields.cc:
            personalization["cc"] = [mailbox(a) for a in fields.cc]
        if fields.bcc:
            personalization["bcc"] = [mailbox(a) for a in fields.bcc]
        template = delivery.provider_template
        if template is not None:
            personalization["dynamic_template_data"] = template.model
        document: dict[str, Any] = {"personalizations": [personalization], "from": mailbox(fields.from_address)}
        if template is None:
            document["subject"] = fields.subject
            document["content"] = [{"type": kind, "value": value} for kind, value in
                                   (("text/plain", fields.text), ("text/html", fields.html)) if value is not None]
        else:
            document["template_id"] = template.name
        if fields.reply_to is not None:
            document["reply_to"] = mailbox(fields.reply_to)
        if fields.attachments:
            document["attachments"] = attachment_documents(fields, "filename", "content", "type",
                                                           disposition="attachment")
        if fields.headers:
            document["headers"] = dict(fields.headers)
        custom_args = with_dedupe_key(string_values(delivery.metadata), delivery.dedupe_key)
        if custom_args:
            document["custom_args"] = custom_args
        return self._post_json("/v3/mail/send", document)

    def interpret(self, response: ApiResponse, delivery: Delivery, now: datetime) -> Outcome:
        status = response.status
        if 200 <= status < 300:
            return Outcome.sent(response.header("x-message-id") or None, reply_code=status)
        message = _error(response)
        described = f"HTTP {status}: {message}"
        if status in (401, 403):
            return auth_pause(response, message, self.auth_pause_seconds)
        if status == 429:
            return Outcome.transient(described, reply_code=status, retry_after_seconds=retry_after(response, now))
        if 400 <= status < 500:
            return Outcome.permanent(described, reply_code=status)
        if status >= 500:
            return Outcome.ambiguous(f"{described}; SendGrid may have accepted the message (no idempotency key)",
                                     reply_code=status)
        return Outcome.transient(f"unexpected answer {described}", reply_code=status)

    def check_request(self) -> ApiRequest:
        return ApiRequest("GET", f"{self.base_url}/v3/scopes", self._headers())
