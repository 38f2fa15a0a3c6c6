"""What a provider API module is made of, and what the provider modules share. Pure: no I/O.

A provider is a class (one module each: :mod:`.resend`, :mod:`.postmark`,
:mod:`.sendgrid`, :mod:`.webhook`) that satisfies :class:`Provider`: its
class attributes say what the settings need to know (``kind``,
``default_base_url``, ``default_rate_per_second``, ``idempotency_window_seconds``),
:meth:`Provider.from_options` makes one from the configured values, and
``build``/``interpret``/``check_request`` turn a message into an
:class:`ApiRequest` and an :class:`ApiResponse` into an
:class:`~outbox_mailer.delivery.Outcome`. The one HTTP edge,
:mod:`outbox_mailer.transports.api.http`, does the I/O.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Protocol, Self

from ..delivery import Delivery, MessageFields, Outcome
from .seam import AUTH_PAUSE_SECONDS, one_line

__all__ = [
    "ApiRequest",
    "ApiResponse",
    "KeyedApi",
    "Provider",
    "ProviderOptions",
    "attachment_documents",
    "auth_pause",
    "json_body",
    "seconds_until_utc_midnight",
    "sent_with_id",
    "split_address",
    "string_values",
]


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


@dataclass(frozen=True, slots=True)
class ProviderOptions:
    """The configured values a provider is made from (plain values: no settings model, no secrets type)."""

    api_key: str | None  # required unless the provider is in-house (``default_base_url`` None)
    base_url: str  # the effective base URL; for an in-house API the URL each email is POSTed to
    signing_secret: str | None = None  # in-house APIs only
    auth_pause_seconds: float = AUTH_PAUSE_SECONDS


class Provider(Protocol):
    """A provider API as pure functions: request building and response interpretation.

    The class attributes are the provider's entry in :mod:`outbox_mailer.providers.registry`
    and what the settings (:class:`outbox_mailer.settings.transports.ApiTransportSettings`) derive from it.
    """

    kind: ClassVar[str]  # OUTBOX_MAILER_TRANSPORTS__<NAME>__KIND
    default_base_url: ClassVar[str | None]  # the public API; None: an in-house API, configured by ``url``
    default_rate_per_second: ClassVar[float | None]  # when rate_per_second is not set; None: unlimited
    idempotency_window_seconds: float | None  # how long the provider de-duplicates by idempotency key

    @classmethod
    def from_options(cls, options: ProviderOptions) -> Provider:
        """The provider for one configured transport."""

    def build(self, fields: MessageFields, delivery: Delivery, message_id: str, key: str,
              now: datetime) -> ApiRequest:
        """The request that sends this message; raises ValueError if it cannot be built."""

    def interpret(self, response: ApiResponse, delivery: Delivery, now: datetime) -> Outcome:
        """What an answer means for the message."""

    def check_request(self) -> ApiRequest:
        """A cheap authenticated request that sends nothing."""


# ---- shared by the provider modules (pure) --------------------------------------------------


def json_body(document: Any) -> bytes:
    """Deterministic JSON bytes: the same message gives the same body on every retry."""
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def seconds_until_utc_midnight(now: datetime) -> float:
    now = now.astimezone(UTC)
    midnight = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return (midnight - now).total_seconds()


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


def attachment_documents(fields: MessageFields, filename: str, content: str, content_type: str,
                         **extra: str) -> list[dict[str, str]]:
    """Each attachment as a provider's JSON object: base64 content under the provider's key names."""
    return [
        {filename: a.filename, content: base64.b64encode(a.content).decode("ascii"), content_type: a.content_type,
         **extra}
        for a in fields.attachments
    ]


def auth_pause(response: ApiResponse, detail: str, pause_seconds: float) -> Outcome:
    return Outcome.paused(
        f"HTTP {response.status}: credentials refused: check api_key ({detail}); "
        f"transport paused for {pause_seconds:g} s",
        pause_seconds, reply_code=response.status,
    )


def sent_with_id(response: ApiResponse, field: str) -> Outcome:
    """A 2xx answer whose JSON body may name the provider's message id in ``field``."""
    body = response.json()
    message_id = body.get(field) if isinstance(body, dict) else None
    return Outcome.sent(str(message_id) if message_id else None, reply_code=response.status)


class KeyedApi:
    """What the keyed providers (Resend, Postmark, SendGrid) share: key, base URL, auth pause."""

    default_rate_per_second: ClassVar[float | None] = None

    def __init__(self, key: str, base_url: str, *, auth_pause_seconds: float = AUTH_PAUSE_SECONDS) -> None:
        self._key = key
        self.base_url = base_url.rstrip("/")
        self.auth_pause_seconds = auth_pause_seconds

    @classmethod
    def from_options(cls, options: ProviderOptions) -> Self:
        if options.api_key is None:
            raise ValueError(f"a transport of kind {getattr(cls, 'kind', cls.__name__)!r} needs api_key")
        return cls(options.api_key, options.base_url, auth_pause_seconds=options.auth_pause_seconds)

    def _headers(self) -> dict[str, str]:
        return {**self._auth_header(), "Accept": "application/json", "User-Agent": "outbox-mailer"}

    def _auth_header(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._key}"}

    def _post_json(self, path: str, document: dict[str, Any] | list[Any], **headers: str) -> ApiRequest:
        headers = {**self._headers(), "Content-Type": "application/json", **headers}
        return ApiRequest("POST", f"{self.base_url}{path}", headers, json_body(document))
