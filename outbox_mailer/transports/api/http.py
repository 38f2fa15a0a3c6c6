"""Provider HTTP APIs over httpx: the only module that imports httpx.

One :class:`HttpApiTransport` per configured API transport, with one
``httpx.AsyncClient`` (at most ``max_parallel`` connections, kept alive). The
provider module (:mod:`.resend`, :mod:`.postmark`, :mod:`.sendgrid`,
:mod:`.webhook`, chosen by ``kind`` in :mod:`outbox_mailer.providers.registry`)
builds the request and interprets the response; this module does the I/O and
translates httpx's errors at the edge:

* the request never left (connection refused or timed out, DNS failure, TLS
  handshake failure, no free connection, a refused URL): ``Outcome.unreachable``
  (not charged), so the circuit breaker pauses the transport;
* the request was written and the answer never came (read timeout, lost
  connection, a malformed answer, the hard cap on one send): ambiguous, safe to
  resend until ``first_attempt_at + 0.9 * window`` when the provider honours
  idempotency keys for ``window`` seconds (Resend: 24 h).

A batch request (:meth:`HttpApiTransport.send_batch`, providers with a batch endpoint,
:mod:`.batches`) follows the same two rules for every member at once.

API keys and signing secrets never appear in an outcome, an error or a log line.
This module leaves the ``httpx`` logger alone (httpx logs every request at INFO;
the logging set-up, :func:`outbox_mailer.serving.logs.configure_logging`, quiets it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace

import anyio
import httpx
from pydantic import SecretStr

from ...clock import utc_now
from ...delivery import BatchOutcome, ComposedMessage, Delivery, Outcome, SendSingly, idempotency_key
from ...errors import TransportUnavailable
from ...providers.batches import BatchItem, BatchProvider, batch_provider
from ...providers.provider import ApiRequest, ApiResponse, Provider, ProviderOptions
from ...providers.registry import API_PROVIDERS, in_house
from ...providers.seam import AUTH_PAUSE_SECONDS, one_line, resend_safe_until
from ...redaction import redacted_url
from ...settings.transports import ApiTransportSettings

__all__ = ["HttpApiTransport", "provider_for"]

# Failures that happen before the request was written: the provider never saw the message.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.ProxyError,
             httpx.UnsupportedProtocol, httpx.LocalProtocolError, httpx.InvalidURL)
_WRITTEN_EVENTS = ("http11.send_request_headers.started", "http2.send_request_headers.started")


@dataclass(frozen=True, slots=True)
class _NoAnswer:
    """A request that got no answer: ``written`` False, the provider never saw it."""

    error: str
    written: bool


def _secret(value: SecretStr | None) -> str | None:
    return value.get_secret_value() if value is not None else None


def provider_for(settings: ApiTransportSettings, *, auth_pause_seconds: float = AUTH_PAUSE_SECONDS) -> Provider:
    """The pure provider description for an API transport's settings (its ``kind`` in the registry)."""
    options = ProviderOptions(_secret(settings.api_key), settings.effective_base_url,
                              signing_secret=_secret(settings.signing_secret), auth_pause_seconds=auth_pause_seconds)
    return API_PROVIDERS[settings.kind].from_options(options)


class HttpApiTransport:
    """Sends through one provider HTTP API (``kind`` resend, postmark, sendgrid or http).

    A :class:`~outbox_mailer.delivery.BatchTransport`: ``batch_limit`` is the provider's
    (Resend 100, Postmark 500) with ``batch=true``, else 0 (never batch).
    """

    def __init__(self, settings: ApiTransportSettings, *, name: str,
                 auth_pause_seconds: float = AUTH_PAUSE_SECONDS) -> None:
        self.name = name
        self.kind = settings.kind
        self.max_parallel = settings.max_parallel
        self.send_timeout_seconds = settings.timeout_seconds
        self.provider: Provider = provider_for(settings, auth_pause_seconds=auth_pause_seconds)
        self.idempotency_window_seconds = self.provider.idempotency_window_seconds
        # the provider's batch side, when it has one and batch=true; batch_limit 0: never batch
        self._batches = batch_provider(self.provider) if settings.batch else None
        self.batch_limit = self._batches.batch_limit if self._batches is not None else 0
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
        answer = await self._exchange(request)
        if isinstance(answer, _NoAnswer):
            return self._no_answer(answer, delivery, "message")
        return self._cleaned(self.provider.interpret(answer, delivery, utc_now()))

    # -- BatchTransport -------------------------------------------------------------

    def batchable(self, message: ComposedMessage, delivery: Delivery) -> bool:
        """Whether the message may go in a batch of this transport (never when batching is off)."""
        return (self._batches is not None and message.fields is not None
                and self._batches.batchable(message.fields, delivery))

    async def send_batch(self, messages: Sequence[ComposedMessage], deliveries: Sequence[Delivery],
                         key: str) -> list[BatchOutcome]:
        """One request for every member, under ``key`` (the batch key recorded before the call).

        The edge's rules of :meth:`send`, for the request as a whole: never sent ->
        unreachable for every member; sent without an answer -> ambiguous for every
        member. A request that cannot be built sends every member singly.
        """
        batches, items = self._batch_items(messages, deliveries)
        if self._closed:
            return [Outcome.held_back(f"transport {self.name!r} is closed") for _ in deliveries]
        try:
            request = batches.build_batch(items, key)
        except ValueError as exc:
            reason = self._clean(f"cannot build the {self.kind} batch request: {exc}")
            return [SendSingly(reason) for _ in deliveries]
        answer = await self._exchange(request)
        if isinstance(answer, _NoAnswer):
            return [self._no_answer(answer, delivery, "batch") for delivery in deliveries]
        outcomes = batches.interpret_batch(answer, deliveries, utc_now())
        if len(outcomes) != len(deliveries):  # a provider module's bug: never guess which member is which
            raise RuntimeError(f"{self.kind}: {len(outcomes)} outcomes for a batch of {len(deliveries)}")
        return [self._cleaned(outcome) if isinstance(outcome, Outcome) else replace(
            outcome, reason=self._clean(outcome.reason)) for outcome in outcomes]

    def batch_digest(self, messages: Sequence[ComposedMessage], deliveries: Sequence[Delivery],
                     key: str) -> str | None:
        """The hex SHA-256 of the request :meth:`send_batch` makes for these arguments (method, URL,
        body); None when it cannot be built (the members then go singly). Raises as send_batch does."""
        batches, items = self._batch_items(messages, deliveries)
        try:
            request = batches.build_batch(items, key)
        except ValueError:
            return None
        digest = hashlib.sha256(f"{request.method} {request.url}\n".encode())
        digest.update(request.body or b"")
        return digest.hexdigest()

    def _batch_items(self, messages: Sequence[ComposedMessage],
                     deliveries: Sequence[Delivery]) -> tuple[BatchProvider, list[BatchItem]]:
        """The batch side and one item per member; ValueError when the members break the contract."""
        if self._batches is None:
            raise ValueError(f"transport {self.name!r} does not batch (batch_limit 0)")
        if len(messages) != len(deliveries) or not 1 <= len(messages) <= self.batch_limit:
            raise ValueError(f"a batch of transport {self.name!r} takes 1-{self.batch_limit} members, as many "
                             f"messages as deliveries (got {len(messages)} and {len(deliveries)})")
        items = []
        for message, delivery in zip(messages, deliveries, strict=True):
            if message.fields is None or not self._batches.batchable(message.fields, delivery):
                raise ValueError(f"row {delivery.dedupe_key!r} cannot go in a batch: send it singly")
            items.append(BatchItem(message.fields, delivery, message.message_id))
        return self._batches, items

    # -- the one request ---------------------------------------------------------------

    async def _exchange(self, request: ApiRequest) -> ApiResponse | _NoAnswer:
        """Make the request within the send timeout: the answer, or why there is none."""
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
                return _NoAnswer(f"{where}: {self._describe(exc)}", written=False)
            except (httpx.HTTPError, OSError) as exc:
                return _NoAnswer(f"{where}: {self._describe(exc)}", written=written)
        if scope.cancelled_caught or response is None:
            limit = f"no answer within the send timeout ({self.send_timeout_seconds:g} s)"
            if not written:
                return _NoAnswer(f"{where}: {limit}; the request was not sent", written=False)
            return _NoAnswer(f"{where}: {limit}", written=True)
        return ApiResponse(response.status_code, {k.lower(): v for k, v in response.headers.items()},
                           response.content)

    def _no_answer(self, answer: _NoAnswer, delivery: Delivery, what: str) -> Outcome:
        if not answer.written:
            return Outcome.unreachable(answer.error)
        return self._ambiguous(delivery, f"{answer.error}; the provider may have accepted the {what}")

    def _cleaned(self, outcome: Outcome) -> Outcome:
        return replace(outcome, error=self._clean(outcome.error)) if outcome.error else outcome

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
