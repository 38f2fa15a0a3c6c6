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

Batches (``POST /emails/batch``, up to 100 emails, no attachments, one ``Idempotency-Key``
for the request, ``x-batch-validation: permissive``): a 2xx answer lists the created
emails' ids in request order under ``data`` and the refused members under ``errors``
(``{"index", "message"}``): each refused member is permanent, each created one sent with
its id; an answer that does not match the members is ambiguous for each. 409
``invalid_idempotent_request`` is ambiguous for each member (an earlier request with the
key may have sent it); any other answer as :func:`.batches.whole_batch` says (a 4xx
refusal sends every member again singly; 401/403, 429, quota and 5xx as for one email).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any, ClassVar

from ..delivery import BatchOutcome, Delivery, MessageFields, Outcome
from .batches import BatchItem, check_members, whole_batch
from .provider import (
    ApiRequest,
    ApiResponse,
    KeyedApi,
    attachment_documents,
    auth_pause,
    seconds_until_utc_midnight,
    sent_with_id,
)
from .seam import one_line, parse_retry_after, resend_safe_until

IDEMPOTENCY_WINDOW_SECONDS = 86_400.0
BATCH_LIMIT = 100  # emails per POST /emails/batch
BATCH_VALIDATION_HEADER = "x-batch-validation"  # "permissive": per-item errors instead of refusing the batch
CONCURRENT_RETRY_SECONDS = 1.0
MONTHLY_QUOTA_PAUSE_SECONDS = 86_400.0
_TAG = re.compile(r"[A-Za-z0-9_-]{1,256}")
# The row's dedupe key goes along as this tag: Resend echoes tags in its webhooks, where
# outbox_mailer.delivery_events.resend reads the key back to match an event to its row.
DEDUPE_TAG = "dedupe_key"


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


def tags_with_key(metadata: dict[str, Any], dedupe_key: str) -> list[dict[str, str]]:
    """:func:`tags` of the metadata, plus the row's key as the ``dedupe_key`` tag.

    A key that is not a valid tag value (a character outside ASCII letters, digits, ``_`` and ``-``,
    or over 256 characters) is left out: Resend would refuse the whole email. The row is then matched
    by ``email_id`` alone (the ``provider_message_id`` recorded from the send's answer). A metadata
    entry named ``dedupe_key`` is never sent under that name: a webhook would take it for the key.
    """
    out = [tag for tag in tags(metadata) if tag["name"] != DEDUPE_TAG]
    if _TAG.fullmatch(dedupe_key):
        out.append({"name": DEDUPE_TAG, "value": dedupe_key})
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
    kind: ClassVar[str] = "resend"
    default_base_url: ClassVar[str | None] = "https://api.resend.com"
    default_rate_per_second: ClassVar[float | None] = 2.0  # Resend's default team limit
    idempotency_window_seconds: float | None = IDEMPOTENCY_WINDOW_SECONDS
    batch_limit: ClassVar[int] = BATCH_LIMIT

    def build(self, fields: MessageFields, delivery: Delivery, message_id: str, key: str,
              now: datetime) -> ApiRequest:
        return self._post_json("/emails", self._document(fields, delivery), **{"Idempotency-Key": key})

    def _document(self, fields: MessageFields, delivery: Delivery) -> dict[str, Any]:
        """One email as Resend's JSON object: the same for a single send and a batch member."""
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
        row_tags = tags_with_key(delivery.metadata, delivery.dedupe_key)
        if row_tags:
            document["tags"] = row_tags
        return document

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

    # -- batches: POST /emails/batch ------------------------------------------------------

    def batchable(self, fields: MessageFields, delivery: Delivery) -> bool:
        return not fields.attachments  # Resend takes no attachments in a batch (nor scheduled_at: never sent)

    def build_batch(self, items: Sequence[BatchItem], key: str) -> ApiRequest:
        check_members(len(items), self.batch_limit, "Resend")
        if any(item.fields.attachments for item in items):
            raise ValueError("Resend takes no attachments in a batch: send such a message singly")
        documents = [self._document(item.fields, item.delivery) for item in items]
        return self._post_json("/emails/batch", documents,
                               **{"Idempotency-Key": key, BATCH_VALIDATION_HEADER: "permissive"})

    def interpret_batch(self, response: ApiResponse, deliveries: Sequence[Delivery],
                        now: datetime) -> list[BatchOutcome]:
        status = response.status
        if 200 <= status < 300:
            return self._members(response, deliveries)
        name, message = _error(response)
        if status == 409 and name == "invalid_idempotent_request":
            # The key was used before with another payload: that earlier request may have sent these.
            return [Outcome.ambiguous(
                f"HTTP 409 {name}: {message}; an earlier request with this batch key may have sent the member "
                "(the in_doubt policy decides)", reply_code=status) for _ in deliveries]
        return whole_batch(response, deliveries, now, self.interpret)

    def _members(self, response: ApiResponse, deliveries: Sequence[Delivery]) -> list[BatchOutcome]:
        """A 2xx answer: ``data`` holds the ids of the created emails in request order, skipping the
        members listed in ``errors`` (``{"index", "message"}``, permissive validation)."""
        body = response.json()
        data = body.get("data") if isinstance(body, dict) else None
        errors = (body.get("errors") or []) if isinstance(body, dict) else []
        refused: dict[int, str] = {}
        for error in errors if isinstance(errors, list) else []:
            index = error.get("index") if isinstance(error, dict) else None
            if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(deliveries):
                refused[index] = one_line(str(error.get("message") or "refused"))
        created = len(deliveries) - len(refused)
        if not isinstance(data, list) or not isinstance(errors, list) or len(refused) != len(errors) \
                or len(data) != created:
            got = f"{len(data)} ids" if isinstance(data, list) else "no ids"
            return [Outcome.ambiguous(
                f"HTTP {response.status}: the batch answer ({got}, {len(refused)} errors) does not match its "
                f"{len(deliveries)} members; Resend may have accepted the message",
                reply_code=response.status,
                resend_safe_until=resend_safe_until(delivery, self.idempotency_window_seconds),
            ) for delivery in deliveries]
        ids = iter(data)
        outcomes: list[BatchOutcome] = []
        for index in range(len(deliveries)):
            if index in refused:
                outcomes.append(Outcome.permanent(f"HTTP {response.status} batch item {index}: {refused[index]}"))
                continue
            entry = next(ids)
            email_id = entry.get("id") if isinstance(entry, dict) else None
            outcomes.append(Outcome.sent(str(email_id) if email_id else None, reply_code=response.status))
        return outcomes
