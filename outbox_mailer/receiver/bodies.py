"""A request's body read no further than a bound: the receiver's webhooks and its unsubscribe pages."""

from __future__ import annotations

from starlette.requests import Request

from ..delivery_events.model import MAX_BODY_BYTES, TooLarge


async def read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The request's body, read no further than ``limit`` bytes (TooLarge past it)."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise TooLarge(f"body of {length} bytes, over the limit of {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise TooLarge(f"body over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
