"""Transports: the edges that hand a composed message to the outside world.

Each transport module is the only importer of its client library and
implements :class:`outbox_mailer.delivery.Transport`:

* :mod:`outbox_mailer.transports.smtp` – SMTP over a pool of persistent
  aiosmtplib connections (with smtp_attempt.py, the only importers of aiosmtplib;
  smtp_wire.py reads pipelined replies, smtp_replies.py classifies them).
* :mod:`outbox_mailer.transports.http` – provider HTTP APIs over one httpx
  client per transport (the only importer of httpx).

A provider API is described by a pure module (no I/O, no httpx) that turns a
message into an :class:`ApiRequest` and an :class:`ApiResponse` into an
:class:`~outbox_mailer.delivery.Outcome`:
:mod:`~outbox_mailer.transports.resend`, :mod:`~outbox_mailer.transports.postmark`,
:mod:`~outbox_mailer.transports.sendgrid` and :mod:`~outbox_mailer.transports.webhook`
(``kind=http``, an in-house API). This package holds what they share and
:func:`build_transports`, which builds every configured transport.

Adding a provider: write a module with a class that has ``kind``,
``idempotency_window_seconds``, ``build()``, ``interpret()`` and ``check_request()``
(see :class:`Provider`), register it in :func:`provider_for`, and add its kind to
:class:`outbox_mailer.config.ApiTransportSettings`.
"""

from __future__ import annotations

import base64
import email.utils
import json
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from ..delivery import Delivery, MessageFields, Outcome

if TYPE_CHECKING:
    from ..config import ApiTransportSettings, Settings
    from ..delivery import Transport

__all__ = [
    "AUTH_PAUSE_SECONDS",
    "ApiRequest",
    "ApiResponse",
    "attachment_documents",
    "sent_with_id",
    "KeyedApi",
    "Provider",
    "build_transports",
    "parse_retry_after",
    "provider_for",
    "resend_safe_until",
    "split_address",
]

AUTH_PAUSE_SECONDS = 300.0  # credentials refused: pause the transport this long, then try again
IDEMPOTENCY_WINDOW_SHARE = 0.9  # trust a provider's key window only up to 90% of its stated length
MAX_ERROR_TEXT = 400


@dataclass(frozen=True, slots=True)
class ApiRequest:
    """One HTTP request, fully built (the body is the exact bytes to send)."""

    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None

    def json(self) -> Any:
        return json.loads(self.body or b"null")


@dataclass(frozen=True, slots=True)
class ApiResponse:
    """One HTTP response; ``headers`` keys are lower-case."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    def json(self) -> Any:
        """The body as JSON, or None when it is not JSON."""
        try:
            return json.loads(self.body.decode("utf-8")) if self.body else None
        except (UnicodeDecodeError, ValueError):
            return None

    def text(self) -> str:
        return one_line(self.body.decode("utf-8", "replace"))


class Provider(Protocol):
    """A provider API as pure functions: request building and response interpretation."""

    kind: str
    idempotency_window_seconds: float | None  # how long the provider de-duplicates by idempotency key

    def build(self, fields: MessageFields, delivery: Delivery, message_id: str, key: str,
              now: datetime) -> ApiRequest:
        """The request that sends this message; raises ValueError if it cannot be built."""

    def interpret(self, response: ApiResponse, delivery: Delivery, now: datetime) -> Outcome:
        """What an answer means for the message."""

    def check_request(self) -> ApiRequest:
        """A cheap authenticated request that sends nothing."""


# ---- helpers shared by the provider modules (pure) ----------------------------------------


def one_line(text: str, limit: int = MAX_ERROR_TEXT) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def json_body(document: Any) -> bytes:
    """Deterministic JSON bytes: the same message gives the same body on every retry."""
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """``Retry-After`` as seconds from ``now``: delta-seconds or an HTTP-date; None if absent or bad."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return max(0.0, (when - now).total_seconds())
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def seconds_until_utc_midnight(now: datetime) -> float:
    now = now.astimezone(UTC)
    midnight = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return (midnight - now).total_seconds()


def resend_safe_until(delivery: Delivery, window_seconds: float | None) -> datetime | None:
    """Until when a resend with the same idempotency key is absorbed by the provider."""
    if not window_seconds or delivery.first_attempt_at is None:
        return None
    return delivery.first_attempt_at + timedelta(seconds=window_seconds * IDEMPOTENCY_WINDOW_SHARE)


_ANGLE = re.compile(r"^(?P<name>.*?)\s*<(?P<addr>[^<>]+)>$", re.DOTALL)


def split_address(display: str) -> tuple[str | None, str]:
    """``Name <addr>`` -> (name, addr); a bare address -> (None, addr). Quoted names are unquoted."""
    match = _ANGLE.match(display.strip())
    if match is None:
        return None, display.strip()
    name = match.group("name").strip()
    if len(name) >= 2 and name[0] == name[-1] == '"':
        name = re.sub(r"\\(.)", r"\1", name[1:-1])
    return (name or None), match.group("addr").strip()


def string_values(metadata: dict[str, Any]) -> dict[str, str]:
    """Metadata with string values (providers take strings only); None values are left out."""
    out = {}
    for name, value in metadata.items():
        if value is None:
            continue
        out[str(name)] = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return out


def auth_pause(response: ApiResponse, detail: str, pause_seconds: float) -> Outcome:
    return Outcome.paused(
        f"HTTP {response.status}: credentials refused: check api_key ({detail}); "
        f"transport paused for {pause_seconds:g} s",
        pause_seconds, reply_code=response.status,
    )


# ---- the factory ----------------------------------------------------------------------------


def provider_for(settings: ApiTransportSettings, *, auth_pause_seconds: float = AUTH_PAUSE_SECONDS) -> Provider:
    """The pure provider description for an API transport's settings."""
    from .postmark import PostmarkApi
    from .resend import ResendApi
    from .sendgrid import SendGridApi
    from .webhook import WebhookApi

    key = settings.api_key.get_secret_value() if settings.api_key is not None else None
    if settings.kind == "resend":
        assert key is not None
        return ResendApi(key, settings.effective_base_url, auth_pause_seconds=auth_pause_seconds)
    if settings.kind == "postmark":
        assert key is not None
        return PostmarkApi(key, settings.effective_base_url, auth_pause_seconds=auth_pause_seconds)
    if settings.kind == "sendgrid":
        assert key is not None
        return SendGridApi(key, settings.effective_base_url, auth_pause_seconds=auth_pause_seconds)
    secret = settings.signing_secret.get_secret_value() if settings.signing_secret is not None else None
    return WebhookApi(settings.effective_base_url, bearer=key, signing_secret=secret,
                      auth_pause_seconds=auth_pause_seconds)




def attachment_documents(fields: MessageFields, filename: str, content: str, content_type: str,
                         **extra: str) -> list[dict[str, str]]:
    """Each attachment as a provider's JSON object: base64 content under the provider's key names."""
    return [
        {filename: a.filename, content: base64.b64encode(a.content).decode("ascii"), content_type: a.content_type,
         **extra}
        for a in fields.attachments
    ]


class KeyedApi:
    """What the keyed providers (Resend, Postmark, SendGrid) share: key, base URL, auth pause."""

    def __init__(self, key: str, base_url: str, *, auth_pause_seconds: float = AUTH_PAUSE_SECONDS) -> None:
        self._key = key
        self.base_url = base_url.rstrip("/")
        self.auth_pause_seconds = auth_pause_seconds

    def _headers(self) -> dict[str, str]:
        return {**self._auth_header(), "Accept": "application/json", "User-Agent": "outbox-mailer"}

    def _auth_header(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._key}"}

    def _post_json(self, path: str, document: dict[str, Any], **headers: str) -> ApiRequest:
        headers = {**self._headers(), "Content-Type": "application/json", **headers}
        return ApiRequest("POST", f"{self.base_url}{path}", headers, json_body(document))


def sent_with_id(response: ApiResponse, field: str) -> Outcome:
    """A 2xx answer whose JSON body may name the provider's message id in ``field``."""
    body = response.json()
    message_id = body.get(field) if isinstance(body, dict) else None
    return Outcome.sent(str(message_id) if message_id else None, reply_code=response.status)


def probe_sender(settings: Settings) -> str | None:
    """The envelope sender `check` probes an SMTP relay with: the default sender's address."""
    from ..addresses import parse_address

    return None if settings.default_from is None else parse_address(settings.default_from, "default_from").addr_spec


def build_transports(settings: Settings) -> dict[str, Transport]:
    """Every configured transport by name: ``smtp`` and each ``OUTBOX_MAILER_TRANSPORTS__<NAME>``."""
    from ..config import SmtpTransportSettings
    from .http import HttpApiTransport
    from .smtp import SmtpTransport

    sender = probe_sender(settings)
    transports: dict[str, Transport] = {"smtp": SmtpTransport(settings.smtp, probe_sender=sender)}
    for name, config in settings.transports.items():
        if isinstance(config, SmtpTransportSettings):
            transports[name] = SmtpTransport(config, name=name, probe_sender=sender)
        else:
            transports[name] = HttpApiTransport(config, name=name)
    return transports
