"""``outbox-mailer webhooks``: the HTTP receiver of provider events (Starlette on uvicorn).

It faces the internet, so it runs apart from the daemon (its own command and systemd unit) and
trusts nothing before the provider's own signature over the raw body checks out. Routes:
``POST /webhooks/<name>`` for each provider of the registry (``delivery_events/webhooks.py``: resend,
postmark, sendgrid, ses, mailgun; 404 unless that provider's secret is set), ``GET`` and ``POST
/unsubscribe/{token}`` (one-click unsubscribe: :mod:`.unsubscribe_pages`), ``GET /healthz``, ``GET /metrics``.

Answers: 413 for a body over 5 MiB (read no further), 401 for a bad or missing signature or
credentials, a stale timestamp or a Mailgun token reused with another body (always the same words:
the reason is logged, never told to a caller who may be probing for the server's clock or the
configured topics), 400 for an authentic
body of the wrong shape, 503 when the database (or SNS's signing certificate) cannot be reached
(the provider retries later, and nothing is lost), 200 otherwise, unknown event types and events of no known
row included (so the provider stops retrying). A provider's retry of an event already written gets 200 and writes
nothing (events are unique on provider and event id; Svix retries reuse ``svix-id``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from ..clock import utc_now
from ..delivery_events import ses
from ..delivery_events.model import (
    Received,
    Unauthenticated,
    Unavailable,
    WebhookRefused,
    WebhookRequest,
)
from ..delivery_events.unsubscribe import UnsubscribeKeys
from ..delivery_events.webhooks import WEBHOOK_PROVIDERS
from ..errors import DatabaseError
from ..settings.events import WebhookSettings
from ..store import EventStore
from ..tracing.spans import configured
from .bodies import read_body
from .intake import take_in
from .unsubscribe_pages import unsubscribe

log = logging.getLogger("outbox_mailer")
CERTIFICATE_CACHE = 32  # SNS signing certificates kept, by URL; as many failures to fetch one
CERTIFICATE_RETRY_SECONDS = 30  # a URL whose certificate could not be fetched is not fetched again before this
UNAUTHENTICATED = "not authenticated: the signature, credentials or timestamp were not accepted\n"
FETCH_TIMEOUT_SECONDS = 10.0


class Receiver:
    """The app's state: settings, the store, the metrics, the SNS certificate cache.

    The cache keeps failures too: a SigningCertURL that could not be fetched answers 503 without a new
    fetch for CERTIFICATE_RETRY_SECONDS, so requests naming it cannot make the receiver fetch it again
    and again (each waits up to FETCH_TIMEOUT_SECONDS).
    """

    def __init__(self, settings: WebhookSettings, store: EventStore, *, automatic_suppression: bool,
                 http: httpx.AsyncClient, clock: Callable[[], datetime] = utc_now,
                 unsubscribe: UnsubscribeKeys | None = None) -> None:
        self.settings, self.store, self.http, self.clock = settings, store, http, clock
        self.unsubscribe = unsubscribe  # the keys of one-click unsubscribe tokens; None: every link is unknown
        self.automatic = automatic_suppression
        self.enabled = set(settings.enabled())
        self.tracing = configured()  # None unless the process traces (docs/tracing.md)
        self._certificates: dict[str, bytes] = {}
        self._failed_certificates: dict[str, tuple[datetime, str]] = {}  # URL -> (fetch again after, why)
        self.registry = CollectorRegistry()
        self.events = Counter("outbox_mailer_webhook_events", "Provider events recorded", ["provider", "kind"],
                              registry=self.registry)
        self.unmatched = Counter("outbox_mailer_webhook_unmatched_events", "Events that matched no row",
                                 ["provider"], registry=self.registry)
        self.refused = Counter("outbox_mailer_webhook_refused_requests",
                               "Requests refused: bad signature (401), malformed (400), too large (413)",
                               ["provider", "status"], registry=self.registry)
        self.unsubscribes = Counter("outbox_mailer_unsubscribes", "One-click unsubscribes by verified link: new, "
                                    "or repeated (a replay changes nothing)", ["outcome"], registry=self.registry)
        self.unavailable = Counter("outbox_mailer_webhook_unavailable_requests",
                                   "Requests answered 503: the database or SNS's certificate could not be reached",
                                   ["provider"],
                                   registry=self.registry)

    async def certificate(self, url: str) -> bytes:
        if url not in self._certificates:
            failed = self._failed_certificates.get(url)
            if failed is not None and self.clock() < failed[0]:
                raise Unavailable(failed[1])
            try:
                reply = await self.http.get(url, timeout=FETCH_TIMEOUT_SECONDS)
                reply.raise_for_status()
            except httpx.HTTPError as exc:  # not the sender's fault: SNS retries a 5xx
                why = f"could not fetch the SNS signing certificate: {exc}"
                _bounded_put(self._failed_certificates, url,
                             (self.clock() + timedelta(seconds=CERTIFICATE_RETRY_SECONDS), why))
                raise Unavailable(why) from None
            self._failed_certificates.pop(url, None)
            _bounded_put(self._certificates, url, reply.content)
        return self._certificates[url]

    async def verified(self, provider: str, headers: dict[str, str], body: bytes) -> Received:
        """The provider's own scheme over the raw body, then its parser."""
        request = WebhookRequest(headers, body, self.clock(), self.certificate)
        return await self.settings.schemes()[provider].received(request)

    async def confirm_subscription(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme != "https" or not ses.SNS_CERT_HOST.fullmatch(parts.hostname or ""):
            raise Unauthenticated("SubscribeURL is not an https URL on an Amazon SNS host")
        try:
            reply = await self.http.get(url, timeout=FETCH_TIMEOUT_SECONDS)
            reply.raise_for_status()
        except httpx.HTTPError as exc:
            raise WebhookRefused(f"could not confirm the SNS subscription: {exc}") from None
        log.info("confirmed the SNS subscription at %s", url.split("?", 1)[0])


def _bounded_put(cache: dict[str, Any], key: str, value: Any) -> None:
    """``cache[key] = value``, the oldest entry dropped first when CERTIFICATE_CACHE are held."""
    if key not in cache and len(cache) >= CERTIFICATE_CACHE:
        cache.pop(next(iter(cache)))
    cache[key] = value


def _webhook(provider: str) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint of ``POST /webhooks/<provider>``."""

    async def endpoint(request: Request) -> Response:
        return await _take(request.app.state.receiver, provider, request)

    return endpoint


async def _take(receiver: Receiver, provider: str, request: Request) -> Response:
    if provider not in receiver.enabled:
        return PlainTextResponse("no such webhook here\n", status_code=404)
    try:
        body = await read_body(request)
        received = await receiver.verified(provider, {k.lower(): v for k, v in request.headers.items()}, body)
        if received.replay_token is not None and not await receiver.store.remember_token(
                provider, received.replay_token, body):
            raise Unauthenticated("token already used with another body (a replay)")
        if received.confirm_url is not None:
            await receiver.confirm_subscription(received.confirm_url)
        intake = await take_in(receiver.store, received.events, automatic=receiver.automatic,
                               now=receiver.clock(), tracing=receiver.tracing)
    except Unavailable as exc:
        return _retry_later(receiver, provider, exc.reason)
    except WebhookRefused as exc:
        receiver.refused.labels(provider, str(exc.status)).inc()
        log.warning("webhook %s refused with %d: %s", provider, exc.status, exc.reason)
        told = UNAUTHENTICATED if isinstance(exc, Unauthenticated) else exc.reason + "\n"
        return PlainTextResponse(told, status_code=exc.status)
    except DatabaseError as exc:
        return _retry_later(receiver, provider, f"database unavailable: {exc}")
    for event in received.events:
        receiver.events.labels(provider, event.kind.value).inc()
    if intake.unmatched:
        receiver.unmatched.labels(provider).inc(intake.unmatched)
    return JSONResponse({"recorded": intake.recorded, "duplicates": intake.duplicates,
                         "unmatched": intake.unmatched})


def _retry_later(receiver: Receiver, provider: str, reason: str) -> Response:
    receiver.unavailable.labels(provider).inc()
    log.warning("webhook %s answered 503, the provider will retry: %s", provider, reason)
    return PlainTextResponse("unavailable, retry later\n", status_code=503, headers={"retry-after": "30"})


async def _healthz(request: Request) -> Response:
    return PlainTextResponse("ok\n")


async def _metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.receiver.registry), media_type=CONTENT_TYPE_LATEST)


def build_app(receiver: Receiver) -> Any:
    app = Starlette(routes=[
        *(Route(f"/webhooks/{name}", _webhook(name), methods=["POST"]) for name in WEBHOOK_PROVIDERS),
        Route("/unsubscribe/{token}", unsubscribe, methods=["GET", "POST"]),
        Route("/healthz", _healthz, methods=["GET"]),
        Route("/metrics", _metrics, methods=["GET"]),
    ])
    app.state.receiver = receiver
    return app
