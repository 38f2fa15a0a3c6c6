"""Postmark (https://postmarkapp.com): ``POST /email``. Pure: no I/O.

A row that names a Postmark template (``provider_template``) goes to ``POST /email/withTemplate`` with
``TemplateAlias`` (``TemplateId`` when the name is digits only) and ``TemplateModel`` (the row's
``template_data``, ``{}`` without one) instead of ``Subject``, ``TextBody`` and ``HtmlBody``; every other field as
for ``/email``. Batches of such rows go to ``POST /email/batchWithTemplates`` (``{"Messages": [...]}``, answered
like ``/email/batch``); one batch never holds both kinds of rows (different endpoints).

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

Batches (``POST /email/batch``, up to 500 messages and 50 MB; no key): HTTP 200 with one
result per message, in order, each with its own ``ErrorCode``: 0 sent with its
``MessageID``, any other code as in the table above for that member alone (406 and 300
permanent, 429 transient, 10 and 405 pause). A result list that does not match the
members is ambiguous for each; any other answer as :func:`.batches.whole_batch` says (a
4xx refusal sends every member again singly; 401/403, 429 and 5xx as for one email).
A message whose JSON exceeds its share of the 50 MB (100 KB less slack) goes singly.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, ClassVar

from ..delivery import BatchOutcome, Delivery, MessageFields, Outcome, ProviderTemplate
from .batches import BatchItem, check_members, whole_batch
from .provider import (
    ApiRequest,
    ApiResponse,
    KeyedApi,
    attachment_documents,
    auth_pause,
    json_body,
    sent_with_id,
    string_values,
)
from .seam import one_line, parse_retry_after

ERROR_BAD_TOKEN = 10
ERROR_INVALID_REQUEST = 300
ERROR_NOT_ALLOWED_TO_SEND = 405
ERROR_INACTIVE_RECIPIENT = 406
ERROR_RATE_LIMIT = 429
BATCH_LIMIT = 500  # messages per POST /email/batch
BATCH_BYTES_LIMIT = 50_000_000  # bytes per POST /email/batch, attachments included
MEMBER_SLACK_BYTES = 2_000  # room for a member's Message-ID header and the list's punctuation
# The row's dedupe key goes along in Metadata under this name: Postmark echoes Metadata in its
# webhooks, where outbox_mailer.delivery_events.postmark reads the key back to match an event to its row.
DEDUPE_METADATA = "dedupe_key"
METADATA_FIELDS_LIMIT = 10  # Postmark refuses a message with more Metadata fields,
METADATA_VALUE_LIMIT = 80  # or a value over 80 characters (names: 20)


def metadata_with_key(metadata: dict[str, Any], dedupe_key: str) -> dict[str, str]:
    """The metadata as strings, plus the row's key under ``dedupe_key``.

    The key is left out when it is over 80 characters, or when the application's own metadata
    already fills the 10 fields (Postmark would refuse the whole message); the row is then matched
    by ``MessageID`` alone. An application entry named ``dedupe_key`` (in any case: Postmark takes
    names case-insensitively) is never sent: a webhook would take it for the key.
    """
    out = {name: value for name, value in string_values(metadata).items() if name.lower() != DEDUPE_METADATA}
    if len(dedupe_key) <= METADATA_VALUE_LIMIT and len(out) < METADATA_FIELDS_LIMIT:
        out[DEDUPE_METADATA] = dedupe_key
    return out


def template_fields(template: ProviderTemplate) -> dict[str, Any]:
    """Which Postmark template renders the message, and its model: an alias, or an id when the name is digits only."""
    name = template.name
    chosen: dict[str, Any] = {"TemplateId": int(name)} if name.isascii() and name.isdigit() else {
        "TemplateAlias": name}
    return {**chosen, "TemplateModel": template.model}


def _error(response: ApiResponse) -> tuple[int | None, str]:
    body = response.json()
    if isinstance(body, dict):
        code = body.get("ErrorCode")
        message = one_line(str(body.get("Message") or ""))
        return (code if isinstance(code, int) else None), message or response.text()
    return None, response.text()


class PostmarkApi(KeyedApi):
    kind: ClassVar[str] = "postmark"
    default_base_url: ClassVar[str | None] = "https://api.postmarkapp.com"
    idempotency_window_seconds: float | None = None
    batch_limit: ClassVar[int] = BATCH_LIMIT
    batch_bytes_limit: ClassVar[int] = BATCH_BYTES_LIMIT

    def _auth_header(self) -> dict[str, str]:
        return {"X-Postmark-Server-Token": self._key}

    def build(self, fields: MessageFields, delivery: Delivery, message_id: str, key: str,
              now: datetime) -> ApiRequest:
        path = "/email" if delivery.provider_template is None else "/email/withTemplate"
        return self._post_json(path, self._document(fields, delivery, message_id))

    def _document(self, fields: MessageFields, delivery: Delivery, message_id: str) -> dict[str, Any]:
        """One email as Postmark's JSON object: the same for a single send and a batch member."""
        template = delivery.provider_template
        document: dict[str, Any] = {"From": fields.from_address, "To": ", ".join(fields.to)}
        document.update({"Subject": fields.subject} if template is None else template_fields(template))
        if fields.cc:
            document["Cc"] = ", ".join(fields.cc)
        if fields.bcc:
            document["Bcc"] = ", ".join(fields.bcc)
        if template is None and fields.text is not None:
            document["TextBody"] = fields.text
        if template is None and fields.html is not None:
            document["HtmlBody"] = fields.html
        if fields.reply_to is not None:
            document["ReplyTo"] = fields.reply_to
        # Our Message-ID goes along so that a repeat after an ambiguous outcome can be recognised.
        document["Headers"] = [{"Name": "Message-ID", "Value": message_id}] + [
            {"Name": name, "Value": value} for name, value in fields.headers
        ]
        if fields.attachments:
            document["Attachments"] = attachment_documents(fields, "Name", "Content", "ContentType")
        metadata = metadata_with_key(delivery.metadata, delivery.dedupe_key)
        if metadata:
            document["Metadata"] = metadata
        return document

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
            return self._refused(code, described, status, parse_retry_after(response.header("retry-after"), now))
        if status >= 500:
            return Outcome.ambiguous(f"{described}; Postmark may have accepted the message (no idempotency key)",
                                     reply_code=status)
        return Outcome.transient(f"unexpected answer {described}", reply_code=status)

    def _refused(self, code: int | None, described: str, reply_code: int | None,
                 retry_after: float | None) -> Outcome:
        """A refusal by ``ErrorCode``: of a single send's 4xx answer, or of one batch member."""
        if code == ERROR_BAD_TOKEN:
            return Outcome.paused(f"{described}: credentials refused: check api_key; transport paused for "
                                  f"{self.auth_pause_seconds:g} s", self.auth_pause_seconds, reply_code=reply_code)
        if code == ERROR_RATE_LIMIT:
            return Outcome.transient(described, reply_code=reply_code, retry_after_seconds=retry_after)
        if code == ERROR_NOT_ALLOWED_TO_SEND:
            return Outcome.paused(f"{described}; transport paused for {self.auth_pause_seconds:g} s",
                                  self.auth_pause_seconds, reply_code=reply_code)
        return Outcome.permanent(described, reply_code=reply_code)

    def check_request(self) -> ApiRequest:
        return ApiRequest("GET", f"{self.base_url}/server", self._headers())

    # -- batches: POST /email/batch --------------------------------------------------------

    def batchable(self, fields: MessageFields, delivery: Delivery) -> bool:
        """Every message whose JSON fits its share of the request's byte bound, so that any
        ``batch_limit`` batchable messages fit in one request; larger ones go singly."""
        return len(json_body(self._document(fields, delivery, ""))) <= self.member_bytes_limit

    @property
    def member_bytes_limit(self) -> int:
        """A member's share of ``batch_bytes_limit`` (room left for its Message-ID and the list's commas)."""
        return self.batch_bytes_limit // self.batch_limit - MEMBER_SLACK_BYTES

    def build_batch(self, items: Sequence[BatchItem], key: str) -> ApiRequest:
        """``key`` is not sent: Postmark has no idempotency key. Rows that name a template go to
        ``/email/batchWithTemplates``, the others to ``/email/batch``; ValueError when the members mix them."""
        check_members(len(items), self.batch_limit, "Postmark")
        documents = [self._document(i.fields, i.delivery, i.message_id) for i in items]
        templated = {i.delivery.provider_template is not None for i in items}
        if len(templated) > 1:
            raise ValueError("a Postmark batch holds rows that name a template or rows that do not, never both")
        request = (self._post_json("/email/batchWithTemplates", {"Messages": documents}) if templated == {True}
                   else self._post_json("/email/batch", documents))
        size = len(request.body or b"")
        if size > self.batch_bytes_limit:
            raise ValueError(f"the Postmark batch is {size} bytes, over the limit of {self.batch_bytes_limit}")
        return request

    def interpret_batch(self, response: ApiResponse, deliveries: Sequence[Delivery],
                        now: datetime) -> list[BatchOutcome]:
        status = response.status
        if not 200 <= status < 300:
            return whole_batch(response, deliveries, now, self.interpret)
        results = response.json()
        if not isinstance(results, list) or len(results) != len(deliveries):
            got = f"{len(results)} results" if isinstance(results, list) else "no result list"
            return [Outcome.ambiguous(f"HTTP {status}: the batch answer ({got}) does not match its {len(deliveries)} "
                                      "members; Postmark may have accepted the message (no idempotency key)",
                                      reply_code=status) for _ in deliveries]
        retry_after = parse_retry_after(response.header("retry-after"), now)
        return [self._member(index, result, status, retry_after) for index, result in enumerate(results)]

    def _member(self, index: int, result: Any, status: int, retry_after: float | None) -> Outcome:
        code = result.get("ErrorCode") if isinstance(result, dict) else None
        if not isinstance(code, int) or isinstance(code, bool):
            return Outcome.ambiguous(f"HTTP {status} batch item {index}: no ErrorCode in its result; Postmark may "
                                     "have accepted the message (no idempotency key)", reply_code=status)
        if code == 0:
            message_id = result.get("MessageID")
            return Outcome.sent(str(message_id) if message_id else None, reply_code=status)
        message = one_line(str(result.get("Message") or ""))
        return self._refused(code, f"HTTP {status} batch item {index}: ErrorCode {code}: {message}", None, retry_after)
