"""A Resend-like HTTP API on 127.0.0.1 with Resend's default limit of 2 requests/s, for the API figure.

Usage: python bench/api_sink.py PORT MAX_SECONDS

Starlette on uvicorn (HTTP/1.1, keep-alive), one process:

* ``POST /emails``: one email object (``from``, ``to``, ``subject`` required), answered
  200 ``{"id": ...}``;
* ``POST /emails/batch``: a JSON array of 1-100 email objects, answered 200
  ``{"data": [{"id": ...}, ...]}`` in the order given; 422 ``validation_error`` for more than
  100 or an invalid item (the batch as a whole, as Resend does);
* ``Authorization: Bearer <anything>`` accepted (401 ``missing_api_key`` without one);
* ``Idempotency-Key``: a repeat of a key replays the first answer and sends nothing;
* every request but ``GET /_stats`` takes a token of a bucket of 2 per second (burst 2); none
  left: 429 ``{"name": "rate_limit_exceeded"}`` with ``retry-after`` (seconds) and nothing sent;
* ``GET /domains`` (the daemon's ``check``) 200; ``GET /_stats`` the counters as JSON:
  requests, rate_limited, replays, emails (accepted, replays not counted), batches, batch_emails,
  max_batch, invalid.

Exits after MAX_SECONDS, or on SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
import uuid
from collections import Counter

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

RATE_PER_SECOND = 2.0
BURST = 2.0
MAX_BATCH = 100


class Bucket:
    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.at = burst, time.monotonic()

    def take(self) -> float:
        """0 when a token was taken; otherwise the seconds until one is there."""
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate


stats: Counter[str] = Counter()
bucket = Bucket(RATE_PER_SECOND, BURST)
answers: dict[str, tuple[int, bytes]] = {}  # Idempotency-Key -> the first answer


def _error(status: int, name: str, message: str, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse({"statusCode": status, "name": name, "message": message}, status, headers=headers)


def _valid(email: object) -> bool:
    return (isinstance(email, dict) and isinstance(email.get("from"), str) and bool(email.get("to"))
            and isinstance(email.get("subject"), str) and ("text" in email or "html" in email))


def _admit(request: Request) -> Response | None:
    """The checks every request passes before it is handled: rate, then credentials."""
    stats["requests"] += 1
    wait = bucket.take()
    if wait:
        stats["rate_limited"] += 1
        return _error(429, "rate_limit_exceeded", "Too many requests. You can only make 2 requests per second.",
                      {"retry-after": str(max(1, math.ceil(wait)))})
    if not request.headers.get("authorization", "").startswith("Bearer "):
        return _error(401, "missing_api_key", "Missing API key in the authorization header.")
    return None


async def _send(request: Request, batch: bool) -> Response:
    refused = _admit(request)
    if refused is not None:
        return refused
    key = request.headers.get("idempotency-key")
    if key and key in answers:
        stats["replays"] += 1
        status, body = answers[key]
        return Response(body, status, media_type="application/json")
    try:
        document = json.loads(await request.body())
    except ValueError:
        stats["invalid"] += 1
        return _error(422, "validation_error", "The request body is not JSON.")
    if batch:
        if not isinstance(document, list) or not 1 <= len(document) <= MAX_BATCH or not all(map(_valid, document)):
            stats["invalid"] += 1
            return _error(422, "validation_error", f"A batch is an array of 1 to {MAX_BATCH} valid emails.")
        ids = [str(uuid.uuid4()) for _ in document]
        stats["batches"] += 1
        stats["batch_emails"] += len(ids)
        stats["max_batch"] = max(stats["max_batch"], len(ids))
        stats["emails"] += len(ids)
        body = json.dumps({"data": [{"id": i} for i in ids]}).encode()
    else:
        if not _valid(document):
            stats["invalid"] += 1
            return _error(422, "validation_error", "from, to, subject and a body are required.")
        stats["emails"] += 1
        body = json.dumps({"id": str(uuid.uuid4())}).encode()
    if key:
        answers[key] = (200, body)
    return Response(body, 200, media_type="application/json")


async def emails(request: Request) -> Response:
    return await _send(request, batch=False)


async def emails_batch(request: Request) -> Response:
    return await _send(request, batch=True)


async def domains(request: Request) -> Response:
    refused = _admit(request)
    return refused or JSONResponse({"data": []})


async def get_stats(request: Request) -> Response:
    return JSONResponse(dict(stats))


app = Starlette(routes=[
    Route("/emails", emails, methods=["POST"]),
    Route("/emails/batch", emails_batch, methods=["POST"]),
    Route("/domains", domains, methods=["GET"]),
    Route("/_stats", get_stats, methods=["GET"]),
])


async def main(port: int, max_seconds: float) -> None:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False,
                                           lifespan="off", timeout_keep_alive=60))

    async def lifetime() -> None:
        await asyncio.sleep(max_seconds)
        server.should_exit = True

    timer = asyncio.create_task(lifetime())
    await server.serve()  # SIGTERM / SIGINT: uvicorn's own graceful stop
    timer.cancel()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), float(sys.argv[2])))
