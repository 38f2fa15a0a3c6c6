"""Provider HTTP APIs over httpx: the only module that imports httpx.

One :class:`HttpApiTransport` per configured API transport, with one
``httpx.AsyncClient`` (at most ``max_parallel`` connections, kept alive). The
provider module (:mod:`.resend`, :mod:`.postmark`, :mod:`.sendgrid`,
:mod:`.webhook`, chosen by ``kind`` in :mod:`outbox_mailer.transports.registry`)
builds the request and interprets the response; this module does the I/O and
translates httpx's errors at the edge:

* the request never left (connection refused or timed out, DNS failure, TLS
  handshake failure, no free connection, a refused URL): ``Outcome.unreachable``
  (not charged), so the circuit breaker pauses the transport;
* the request was written and the answer never came (read timeout, lost
  connection, a malformed answer, the hard cap on one send): ambiguous, safe to
  resend until ``first_attempt_at + 0.9 * window`` when the provider honours
  idempotency keys for ``window`` seconds (Resend: 24 h).

API keys and signing secrets never appear in an outcome, an error or a log line.
This module leaves the ``httpx`` logger alone (httpx logs every request at INFO;
the logging set-up, :func:`outbox_mailer.logs.configure_logging`, quiets it).
"""

from __future__ import annotations

from dataclasses import replace

import anyio
import httpx
from pydantic import SecretStr

from ...clock import utc_now
from ...config import ApiTransportSettings
from ...delivery import ComposedMessage, Delivery, Outcome, idempotency_key
from ...errors import TransportUnavailable
from ...redaction import redacted_url
from ..registry import API_PROVIDERS, in_house
from ..seam import AUTH_PAUSE_SECONDS, one_line, resend_safe_until
from .provider import ApiRequest, ApiResponse, Provider, ProviderOptions

__all__ = ["HttpApiTransport", "provider_for"]

# Failures that happen before the request was written: the provider never saw the message.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.ProxyError,
             httpx.UnsupportedProtocol, httpx.LocalProtocolError, httpx.InvalidURL)
_WRITTEN_EVENTS = ("http11.send_request_headers.started", "http2.send_request_headers.started")


def _secret(value: SecretStr | None) -> str | None:
    return value.get_secret_value() if value is not None else None


def provider_for(settings: ApiTransportSettings, *, auth_pause_seconds: float = AUTH_PAUSE_SECONDS) -> Provider:
    """The pure provider description for an API transport's settings (its ``kind`` in the registry)."""
    options = ProviderOptions(_secret(settings.api_key), settings.effective_base_url,
                              signing_secret=_secret(settings.signing_secret), auth_pause_seconds=auth_pause_seconds)
    return API_PROVIDERS[settings.kind].from_options(options)


class HttpApiTransport:
    """Sends through one provider HTTP API (``kind`` resend, postmark, sendgrid or http)."""

    def __init__(self, settings: ApiTransportSettings, *, name: str,
                 auth_pause_seconds: float = AUTH_PAUSE_SECONDS) -> None:
        self.name = name
        self.kind = settings.kind
        self.max_parallel = settings.max_parallel
        self.send_timeout_seconds = settings.timeout_seconds
        self.provider: Provider = provider_for(settings, auth_pause_seconds=auth_pause_seconds)
        self.idempotency_window_seconds = self.provider.idempotency_window_seconds
        self._secrets = [s.get_secret_value() for s in (settings.api_key, settings.signing_secret)
                         if s is not None and s.get_secret_value()]
        timeout = settings.timeout_seconds
        self._client = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=settings.max_parallel,
                                max_keepalive_connections=settings.max_parallel),
            # connecting gets a share of the budget so that "unreachable" is told apart from
            # "no answer" before the hard cap of the whole send strikes
            timeout=httpx.Timeout(timeout, connect=timeout * 0.8),
            follow_redirects=False,
        )
        self._closed = False

    # -- helpers ---------------------------------------------------------------

    def _clean(self, text: str) -> str:
        """One line without secrets or URL credentials."""
        for secret in self._secrets:
            text = text.replace(secret, "**********")
        return one_line(text)

    def _describe(self, exc: BaseException) -> str:
        detail = str(exc) or type(exc).__name__
        return self._clean(f"{type(exc).__name__}: {detail}")

    def _where(self, request: ApiRequest) -> str:
        return f"{request.method} {redacted_url(request.url)}"

    def _ambiguous(self, delivery: Delivery, error: str) -> Outcome:
        return Outcome.ambiguous(
            error, resend_safe_until=resend_safe_until(delivery, self.idempotency_window_seconds)
        )

    # -- Transport ----------------------------------------------------------------

    async def send(self, message: ComposedMessage, delivery: Delivery) -> Outcome:
        if message.fields is None:
            return Outcome.unsendable("the message has no fields for an API transport")
        if self._closed:
            return Outcome.held_back(f"transport {self.name!r} is closed")
        now = utc_now()
        try:
            request = self.provider.build(message.fields, delivery, message.message_id,
                                          idempotency_key(delivery, message), now)
        except ValueError as exc:
            return Outcome.unsendable(self._clean(f"cannot build the {self.kind} request: {exc}"))
        written = False

        async def trace(event: str, info: object) -> None:
            nonlocal written
            if event in _WRITTEN_EVENTS:
                written = True

        where = self._where(request)
        response: httpx.Response | None = None
        with anyio.move_on_after(self.send_timeout_seconds) as scope:
            try:
                response = await self._client.request(
                    request.method, request.url, headers=request.headers, content=request.body,
                    extensions={"trace": trace},
                )
            except _NOT_SENT as exc:
                return Outcome.unreachable(f"{where}: {self._describe(exc)}")
            except (httpx.HTTPError, OSError) as exc:
                if not written:
                    return Outcome.unreachable(f"{where}: {self._describe(exc)}")
                return self._ambiguous(
                    delivery, f"{where}: {self._describe(exc)}; the provider may have accepted the message")
        if scope.cancelled_caught or response is None:
            limit = f"no answer within the send timeout ({self.send_timeout_seconds:g} s)"
            if not written:
                return Outcome.unreachable(f"{where}: {limit}; the request was not sent")
            return self._ambiguous(delivery, f"{where}: {limit}; the provider may have accepted the message")
        answer = ApiResponse(response.status_code, {k.lower(): v for k, v in response.headers.items()},
                             response.content)
        outcome = self.provider.interpret(answer, delivery, utc_now())
        if outcome.error:
            outcome = replace(outcome, error=self._clean(outcome.error))
        return outcome

    async def check(self) -> str:
        request = self.provider.check_request()
        where = self._where(request)
        try:
            with anyio.fail_after(self.send_timeout_seconds):
                response = await self._client.request(request.method, request.url, headers=request.headers)
        except TimeoutError as exc:
            raise TransportUnavailable(f"{where}: no answer within {self.send_timeout_seconds:g} s",
                                       transport=self.name) from exc
        except (httpx.HTTPError, httpx.InvalidURL, OSError) as exc:
            raise TransportUnavailable(f"{where}: {self._describe(exc)}", transport=self.name) from exc
        status = response.status_code
        if status in (401, 403):
            raise TransportUnavailable(f"{where}: HTTP {status}: credentials refused: check api_key",
                                       transport=self.name)
        verdict = "credentials accepted" if 200 <= status < 300 and not in_house(self.kind) else "reachable"
        return f"{self.kind} {where}: HTTP {status} ({verdict})"

    async def aclose(self) -> None:
        self._closed = True
        await self._client.aclose()
