"""A real HTTP server on 127.0.0.1 that behaves like the email providers, with fault injection.

``ProviderServer`` (``http.server.ThreadingHTTPServer`` in a thread, HTTP/1.1 keep-alive):

* Resend at ``POST /emails`` (``GET /domains`` for checks): bearer token, validation (422),
  and idempotency keys as Resend keeps them: the key is stored with a hash of the payload
  and the first response; a repeat with the same payload replays that response and sends
  nothing, another payload gets 409 ``invalid_idempotent_request``, a repeat while the first
  request is still being processed gets 409 ``concurrent_idempotent_requests``.
* Postmark at ``POST /email`` (``GET /server``), ``X-Postmark-Server-Token``, 422 with
  ``ErrorCode`` 300 for an invalid request and 406 for a recipient at ``inactive@...``; its templates at
  ``POST /email/withTemplate`` and ``POST /email/batchWithTemplates`` (``{"Messages": [...]}``).
* SendGrid at ``POST /v3/mail/send`` (``GET /v3/scopes``), 202 with ``X-Message-Id``; ``content`` is
  required unless the message names a ``template_id``.
* An in-house API at ``POST /hook`` (``HEAD /hook``): optional bearer token, optional
  HMAC signature check (401 when wrong), idempotency keys as for Resend.
* Batches: Resend ``POST /emails/batch`` (up to 100, one ``Idempotency-Key`` kept as
  above, permissive validation on request) and Postmark ``POST /email/batch`` (up to 500,
  an ``ErrorCode`` per message), and a requests-per-second limit (``rate_per_second``, 429
  with Retry-After): the rules are in tests/provider_batches.py.

Scripted faults (:class:`Fault`, first match wins, each with a count and a probability;
batch paths included):
``reply`` (answer with a status before doing anything: 429 with Retry-After, quota 429,
401, 503 ...), ``slow`` (hold the request, key in progress, then handle it normally),
``accept_500`` (accept the email, then answer 500), ``accept_drop`` (accept the email,
then close the connection without an answer) and ``drop`` (close without accepting).
The ``delay`` of a ``slow``, ``accept_500`` or ``accept_drop`` fault holds the request that
long, key in progress, before it is handled: ``accept_500`` with a delay is a slow request
answered 500 after accepting.

Observations: emails accepted (``accepted``: per idempotency key for a single send, per
dedupe header for a batch item, so a key counted twice is an email delivered twice) and per
dedupe header (``X-Test-Key`` in the email's own headers), batch requests accepted per
key, timestamps of accepted emails (a rate meter), replays, conflicts, rate-limited
requests, and every request with its headers and body.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.provider_batches import RateLimit, batch_answer, batch_refusal, email_problem, rate_limited

KEY_HEADER = "X-Test-Key"
BATCH_PATHS = ("/emails/batch", "/email/batch", "/email/batchWithTemplates")
TEMPLATE_PATHS = ("/email/withTemplate", "/email/batchWithTemplates")  # Postmark's
SEND_PATHS = ("/emails", "/email", "/email/withTemplate", "/v3/mail/send", "/hook", *BATCH_PATHS)
IDEMPOTENT_PATHS = ("/emails", "/hook", "/emails/batch")
KINDS = {"/emails": "resend", "/domains": "resend", "/emails/batch": "resend", "/email": "postmark",
         "/server": "postmark", "/email/batch": "postmark", "/email/withTemplate": "postmark",
         "/email/batchWithTemplates": "postmark", "/v3/mail/send": "sendgrid", "/v3/scopes": "sendgrid",
         "/hook": "hook"}


@dataclass
class Fault:
    action: str  # reply | slow | accept_500 | accept_drop | drop
    status: int = 500
    body: Any = None  # JSON document of a ``reply``
    headers: dict[str, str] = field(default_factory=dict)
    count: int | None = None  # None: every matching request until removed
    probability: float = 1.0
    delay: float = 0.0  # seconds to hold the request before handling it (``slow``, ``accept_500`` ...)
    paths: tuple[str, ...] = SEND_PATHS
    hits: int = 0


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    status: int | None = None  # None: the connection was dropped

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class _KeyRecord:
    payload_hash: str
    in_progress: bool = True
    status: int = 0
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up (timeout, kill -9) is part of the test


class _Drop(Exception):
    """Close the connection without an answer."""


class ProviderServer:
    def __init__(self, *, token: str = "test", hook_bearer: str | None = None, signing_secret: str | None = None,
                 seed: int | None = None, rate_per_second: float | None = None, burst: int = 1) -> None:
        self.token = token
        # None: no limit; Resend's default is 2 requests per second
        self.rate_limit = RateLimit(rate_per_second, burst) if rate_per_second is not None else None
        self.hook_bearer = hook_bearer
        self.signing_secret = signing_secret
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.faults: list[Fault] = []
        self.keys: dict[str, _KeyRecord] = {}
        self.accepted: Counter[str] = Counter()  # per idempotency key (or dedupe header when there is none)
        self.accepted_by_header: Counter[str] = Counter()  # per KEY_HEADER of the email
        self.accepted_times: list[float] = []  # time.monotonic() of each accepted email
        self.batches: Counter[str] = Counter()  # accepted batch requests per idempotency key ("" without one)
        self.request_times: list[float] = []  # every send request
        self.requests: list[Recorded] = []
        self.replays = 0
        self.conflicts = 0  # 409 invalid_idempotent_request
        self.concurrent = 0  # 409 concurrent_idempotent_requests
        self.answers: Counter[int] = Counter()  # status of every answer to a send request
        self.record_requests = True
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # -- life ----------------------------------------------------------------------

    def start(self) -> ProviderServer:
        server = self

        class Handler(_Handler):
            provider = server

        self._httpd = _QuietServer(("127.0.0.1", self.port), Handler)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True, name="provider-server")
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def hook_url(self) -> str:
        return f"{self.base_url}/hook"

    # -- script --------------------------------------------------------------------

    def add_fault(self, action: str, **kw: Any) -> Fault:
        fault = Fault(action, **kw)
        with self.lock:
            self.faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self.lock:
            self.faults.clear()

    def _pick_fault(self, path: str) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if path not in fault.paths or (fault.count is not None and fault.hits >= fault.count):
                    continue
                if fault.probability < 1.0 and self.rng.random() >= fault.probability:
                    continue
                fault.hits += 1
                return fault
        return None

    # -- observations ----------------------------------------------------------------

    def sends(self, path: str | None = None) -> list[Recorded]:
        with self.lock:
            return [r for r in self.requests if r.path in SEND_PATHS and (path is None or r.path == path)]

    def accepted_between(self, start: float, end: float) -> int:
        with self.lock:
            return sum(1 for t in self.accepted_times if start <= t < end)

    def total_accepted(self) -> int:
        with self.lock:
            return sum(self.accepted.values())


def _email_header(payload: Any, name: str) -> str | None:
    """A header of the email itself, whatever the provider's shape."""
    if not isinstance(payload, dict):
        return None
    headers = payload.get("headers", payload.get("Headers"))
    if isinstance(headers, dict):
        for key, value in headers.items():
            if key.lower() == name.lower():
                return str(value)
    if isinstance(headers, list):
        for item in headers:
            if isinstance(item, dict) and str(item.get("Name", "")).lower() == name.lower():
                return str(item.get("Value"))
    return None


class _Handler(BaseHTTPRequestHandler):
    provider: ProviderServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # -- plumbing ----------------------------------------------------------------------

    def _answer(self, status: int, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, bytes,
                                                                                                     dict[str, str]]:
        raw = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        headers = dict(headers or {})
        if raw:
            headers.setdefault("Content-Type", "application/json")
        return status, raw, headers

    def _write(self, status: int, raw: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(raw)

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if len(body) < length:  # the client went away in the middle of the body (kill -9)
            self.close_connection = True
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        path = self.path.split("?", 1)[0]
        server = self.provider
        record = Recorded(self.command, path, headers, body)
        if path in SEND_PATHS and self.command == "POST":
            with server.lock:
                server.request_times.append(time.monotonic())
                if server.record_requests:
                    server.requests.append(record)
        try:
            status, raw, out_headers = self._route(path, headers, body)
        except _Drop:
            self.close_connection = True
            return
        record.status = status
        if path in SEND_PATHS:
            with server.lock:
                server.answers[status] += 1
        self._write(status, raw, out_headers)

    do_GET = do_POST = do_HEAD = _handle

    # -- routing -------------------------------------------------------------------------

    def _route(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes, dict[str, str]]:
        server = self.provider
        kind = KINDS.get(path)
        if kind is None:
            return self._answer(404, {"message": "not found"})
        denied = self._auth(kind, headers, body)
        if denied is not None:
            return denied
        if path not in SEND_PATHS or self.command != "POST":
            return self._answer(200, {"data": []} if self.command != "HEAD" else None)
        wait = server.rate_limit.wait() if server.rate_limit is not None else None
        if wait is not None:
            return self._answer(*rate_limited(kind, wait))
        fault = server._pick_fault(path)
        if fault is not None and fault.action == "reply":
            return self._answer(fault.status, fault.body, fault.headers)
        if fault is not None and fault.action == "drop":
            raise _Drop
        try:
            payload = json.loads(body)
        except ValueError:
            return self._invalid(kind, "body is not JSON")
        batch, template = path in BATCH_PATHS, path in TEMPLATE_PATHS
        if batch and template:
            payload = payload.get("Messages") if isinstance(payload, dict) else None
        if batch:
            permissive = headers.get("x-batch-validation", "").lower() == "permissive"
            refusal = batch_refusal(kind, payload, permissive)
            problem = None if refusal is None else self._invalid(kind, refusal)
        else:
            problem = self._validate(kind, payload, template)
        if problem is not None:
            return problem
        key = headers.get("idempotency-key") if path in IDEMPOTENT_PATHS else None
        payload_hash = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
        if key is not None:
            with server.lock:
                known = server.keys.get(key)
                if known is not None:
                    if known.in_progress:
                        server.concurrent += 1
                        return self._answer(409, {"statusCode": 409, "name": "concurrent_idempotent_requests",
                                                  "message": "Same idempotency key used while original request "
                                                             "is still in progress."})
                    if known.payload_hash != payload_hash:
                        server.conflicts += 1
                        return self._answer(409, {"statusCode": 409, "name": "invalid_idempotent_request",
                                                  "message": "Same idempotency key used with a different "
                                                             "request payload."})
                    server.replays += 1
                    return known.status, known.body, dict(known.headers)
                server.keys[key] = _KeyRecord(payload_hash)
        if fault is not None and fault.delay:
            time.sleep(fault.delay)
        if batch:
            status, raw, out_headers = self._answer(200, batch_answer(kind, payload, self._deliver_item, template))
            with server.lock:
                server.batches[key or ""] += 1
        else:
            status, raw, out_headers = self._accept(kind, payload, key)
        if key is not None:
            with server.lock:
                server.keys[key] = _KeyRecord(payload_hash, False, status, raw, out_headers)
        if fault is not None and fault.action == "accept_500":
            return self._answer(500, {"statusCode": 500, "name": "application_error",
                                      "message": "An unexpected error occurred."})
        if fault is not None and fault.action == "accept_drop":
            raise _Drop
        return status, raw, out_headers

    def _auth(self, kind: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes, dict[str, str]] | None:
        server = self.provider
        bearer = headers.get("authorization")
        if kind == "resend" and bearer != f"Bearer {server.token}":
            return self._answer(401 if bearer is None else 403,
                                {"statusCode": 403, "name": "invalid_api_key", "message": "API key is invalid"})
        if kind == "postmark" and headers.get("x-postmark-server-token") != server.token:
            return self._answer(401, {"ErrorCode": 10, "Message": "The Server Token you provided was invalid."})
        if kind == "sendgrid" and bearer != f"Bearer {server.token}":
            return self._answer(401, {"errors": [{"message": "The provided authorization grant is invalid, "
                                                             "expired, or revoked", "field": None}]})
        if kind == "hook":
            if server.hook_bearer is not None and bearer != f"Bearer {server.hook_bearer}":
                return self._answer(401, {"message": "bad token"})
            if server.signing_secret is not None and self.command == "POST":
                stamp = headers.get("x-outbox-timestamp", "")
                expected = "v1=" + hmac.new(server.signing_secret.encode(), stamp.encode() + b"." + body,
                                            hashlib.sha256).hexdigest()
                if not hmac.compare_digest(expected, headers.get("x-outbox-signature", "")):
                    return self._answer(401, {"message": "bad signature"})
        return None

    def _invalid(self, kind: str, message: str) -> tuple[int, bytes, dict[str, str]]:
        if kind == "resend":
            return self._answer(422, {"statusCode": 422, "name": "validation_error", "message": message})
        if kind == "postmark":
            return self._answer(422, {"ErrorCode": 300, "Message": f"Invalid email request: {message}"})
        if kind == "sendgrid":
            return self._answer(400, {"errors": [{"message": message, "field": None}]})
        return self._answer(400, {"message": message})

    def _validate(self, kind: str, p: Any, template: bool) -> tuple[int, bytes, dict[str, str]] | None:
        if kind in ("resend", "postmark"):
            problem = email_problem(kind, p, template)
            if problem is None:
                return None
            if kind == "resend":
                return self._invalid(kind, problem[1])
            return self._answer(422, {"ErrorCode": problem[0], "Message": problem[1]})
        if not isinstance(p, dict):
            return self._invalid(kind, "body is not an object")
        if kind == "sendgrid":
            if not p.get("personalizations") or not (p.get("from") or {}).get("email") or not (
                    p.get("content") or p.get("template_id")):
                return self._invalid(kind, "personalizations, from and content (or a template_id) are required")
        elif not p.get("dedupe_key") or not p.get("to"):
            return self._invalid(kind, "dedupe_key and to are required")
        return None

    def _deliver(self, payload: dict[str, Any], counted: str | None) -> str:
        """Count one accepted email under ``counted`` (else its dedupe header, else its new id); its id."""
        server = self.provider
        message_id = str(uuid.uuid4())
        dedupe = _email_header(payload, KEY_HEADER)
        with server.lock:
            server.accepted[counted or dedupe or message_id] += 1
            if dedupe is not None:
                server.accepted_by_header[dedupe] += 1
            server.accepted_times.append(time.monotonic())
        return message_id

    def _deliver_item(self, item: dict[str, Any]) -> str:
        """A batch item is counted by its dedupe header, else its own Message-ID: never by the batch key."""
        return self._deliver(item, _email_header(item, KEY_HEADER) or _email_header(item, "Message-ID"))

    def _accept(self, kind: str, payload: dict[str, Any], key: str | None) -> tuple[int, bytes, dict[str, str]]:
        message_id = self._deliver(payload, key)
        if kind == "resend":
            return self._answer(200, {"id": message_id})
        if kind == "postmark":
            return self._answer(200, {"To": payload["To"], "SubmittedAt": "2026-01-01T00:00:00Z",
                                      "MessageID": message_id, "ErrorCode": 0, "Message": "OK"})
        if kind == "sendgrid":
            return self._answer(202, None, {"X-Message-Id": message_id})
        return self._answer(200, {"id": f"hook-{message_id}"})


@pytest.fixture
def provider_server() -> Iterator[ProviderServer]:
    server = ProviderServer().start()
    try:
        yield server
    finally:
        server.stop()
