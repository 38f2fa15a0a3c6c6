"""The fake provider's batch rules and rate limit, for tests/provider_server.py. Pure: no I/O.

* Resend ``POST /emails/batch``: a JSON array of 1-100 emails, none with ``attachments`` or
  ``scheduled_at``. Strict validation (the default) refuses the whole request with 422 when
  one item is invalid; with ``x-batch-validation: permissive`` each invalid item is listed
  under ``errors`` as ``{"index", "message"}`` and the others are created, ``data`` holding
  their ids in request order.
* Postmark ``POST /email/batch``: a JSON array of 1-500 messages; HTTP 200 with one result
  per message, in order, each with its own ``ErrorCode`` (0 accepted, with its ``MessageID``).
  ``POST /email/batchWithTemplates``: the same for ``{"Messages": [...]}`` of template messages.
* A Postmark template message (``/email/withTemplate`` and its batch) names ``TemplateAlias`` or
  ``TemplateId``, has a ``TemplateModel`` object, and no ``Subject``, ``TextBody`` or ``HtmlBody``
  (``ErrorCode`` 300 otherwise); a message to ``/email`` needs a body.
* The same rules for one email as a single send: a recipient at ``malformed@...`` is
  invalid (Resend 422, Postmark ``ErrorCode`` 300), Postmark refuses one at ``inactive@...``
  with 406.
* :class:`RateLimit`: at most ``burst`` send requests in any ``burst / rate`` seconds;
  the others get 429 ``rate_limit_exceeded`` with Retry-After (and do not count).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

BATCH_LIMITS = {"resend": 100, "postmark": 500}
Problem = tuple[int, str]  # (Postmark's ErrorCode, or 422 for Resend; the message)


def email_problem(kind: str, p: Any, template: bool = False) -> Problem | None:
    """Why Resend or Postmark refuses one email (sent singly or as a batch item), or None. ``template``: sent
    to one of Postmark's template endpoints."""
    if not isinstance(p, dict):
        return (300, "Invalid email request: body is not an object") if kind == "postmark" else (
            422, "body is not an object")
    if kind == "resend":
        if not p.get("from") or not p.get("to") or "subject" not in p or not (p.get("text") or p.get("html")):
            return 422, "Missing `from`, `to`, `subject` or a body"
        if any("malformed@" in str(to) for to in p["to"]):
            return 422, "Invalid `to` field."
    elif kind == "postmark":
        if template and (not ("TemplateAlias" in p or "TemplateId" in p) or not isinstance(p.get("TemplateModel"), dict)
                         or {"Subject", "TextBody", "HtmlBody"} & p.keys()):
            return 300, "Invalid email request: a template message names its template and model, and no content"
        if not p.get("From") or not p.get("To") or not (template or p.get("TextBody") or p.get("HtmlBody")):
            return 300, "Invalid email request: Missing From, To or a body"
        if "malformed@" in p["To"]:
            return 300, "Invalid email request: Error parsing 'To'"
        if "inactive@" in p["To"]:
            return 406, "You tried to send to recipient(s) that have been marked as inactive."
    return None


def item_problem(kind: str, item: Any, template: bool = False) -> Problem | None:
    """Why a batch refuses one item: what a single send refuses, and Resend's batch-only refusals."""
    if kind == "resend" and isinstance(item, dict) and (item.get("attachments") or "scheduled_at" in item):
        return 422, "The `attachments` and `scheduled_at` fields are not supported in batch emails."
    return email_problem(kind, item, template)


def batch_refusal(kind: str, payload: Any, permissive: bool) -> str | None:
    """Why the whole request is refused (422), or None: not 1..limit emails, or (Resend, strict) a bad item."""
    limit = BATCH_LIMITS[kind]
    if not isinstance(payload, list) or not 1 <= len(payload) <= limit:
        return f"a batch is a JSON array of 1 to {limit} emails"
    if kind == "resend" and not permissive:
        for index, item in enumerate(payload):
            problem = item_problem(kind, item)
            if problem is not None:
                return f"emails[{index}]: {problem[1]}"
    return None


def batch_answer(kind: str, payload: list[Any], deliver: Callable[[dict[str, Any]], str],
                 template: bool = False) -> Any:
    """The JSON body of the 200 answer; ``deliver`` accepts one valid item and returns its id."""
    results: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    for index, item in enumerate(payload):
        problem = item_problem(kind, item, template)
        if kind == "resend":
            if problem is not None:
                errors.append({"index": index, "message": problem[1]})
            else:
                results.append({"id": deliver(item)})
        elif problem is not None:
            results.append({"ErrorCode": problem[0], "Message": problem[1]})
        else:
            results.append({"To": item["To"], "SubmittedAt": "2026-01-01T00:00:00Z", "ErrorCode": 0,
                            "Message": "OK", "MessageID": deliver(item)})
    if kind == "postmark":
        return results
    return {"data": results, "errors": errors} if errors else {"data": results}


class RateLimit:
    """At most ``burst`` requests in any window of ``burst / rate`` seconds (a sliding window)."""

    def __init__(self, rate_per_second: float, burst: int = 1) -> None:
        self.burst = max(burst, 1)
        self.window = self.burst / rate_per_second
        self.refused = 0
        self._admitted: deque[float] = deque()
        self._lock = threading.Lock()

    def wait(self) -> float | None:
        """None when a request may go through now (it is counted), else the seconds until one may."""
        with self._lock:
            now = time.monotonic()
            while self._admitted and self._admitted[0] <= now - self.window:
                self._admitted.popleft()
            if len(self._admitted) >= self.burst:
                self.refused += 1
                return self._admitted[0] + self.window - now
            self._admitted.append(now)
            return None


def rate_limited(kind: str, wait: float) -> tuple[int, Any, dict[str, str]]:
    """The 429 answer: status, JSON body, headers."""
    retry = {"Retry-After": str(max(1, math.ceil(wait)))}
    if kind == "postmark":
        return 429, {"ErrorCode": 429, "Message": "Rate limit exceeded."}, retry
    return 429, {"statusCode": 429, "name": "rate_limit_exceeded",
                 "message": "Too many requests. Please limit the number of requests per second."}, {
        **retry, "ratelimit-remaining": "0"}
