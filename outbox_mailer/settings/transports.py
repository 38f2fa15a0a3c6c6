"""The transports' settings: the default SMTP transport (``OUTBOX_MAILER_SMTP__*``) and each named one
(``OUTBOX_MAILER_TRANSPORTS__<NAME>__*``, SMTP or a provider API whose kinds come from the registry),
each field's default and range documented beside it; the daemon's other settings are in :mod:`.config`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator

from ..providers.registry import API_PROVIDERS, BATCH_KINDS, has_batch_endpoint, in_house
from .checks import check_helo_name
from .limits import DAY, HOUR, LimitSettings

TLS_DEFAULT_PORTS = {"none": 25, "starttls": 587, "implicit": 465}


class SmtpSettings(LimitSettings):
    """The default SMTP transport; its limits and fallback are LimitSettings'."""

    host: str = "localhost"  # mail server (MTA, relay or provider's SMTP endpoint)
    port: int | None = Field(default=None, ge=1, le=65535)  # None: 25 / 587 / 465 by tls
    tls: Literal["none", "starttls", "implicit"] = "starttls"  # starttls is required, not opportunistic
    username: str | None = None  # AUTH only when set
    password: SecretStr | None = None
    allow_plaintext_auth: bool = False  # AUTH over tls=none is refused unless this is true
    validate_certs: bool = True
    ca_file: str | None = None  # extra CA bundle (PEM) for private relays
    helo_name: str | None = None  # None: the local host name
    pool_size: int = Field(default=4, ge=1, le=256)  # persistent connections; 1-256
    connect_timeout_seconds: float = Field(default=10.0, gt=0, le=HOUR)  # TCP connect and greeting; at most 1 h
    command_timeout_seconds: float = Field(default=20.0, gt=0, le=HOUR)  # each EHLO/MAIL/RCPT/... reply; at most 1 h
    data_timeout_seconds: float = Field(default=45.0, gt=0, le=HOUR)  # reply after the message body; at most 1 h
    send_timeout_seconds: float = Field(default=60.0, gt=0, le=HOUR)  # hard cap on one whole send, connecting included; at most 1 h
    idempotency_header: str | None = None  # e.g. Resend-Idempotency-Key: relays that de-duplicate by a header
    idempotency_window_seconds: float = Field(default=86_400.0, gt=0, le=30 * DAY)  # how long the relay remembers a key; at most 30 days

    @field_validator("helo_name")
    @classmethod
    def _helo_name(cls, value: str | None) -> str | None:
        return value if value is None else check_helo_name(value)

    @property
    def effective_port(self) -> int:
        return self.port if self.port is not None else TLS_DEFAULT_PORTS[self.tls]

    @model_validator(mode="after")
    def _timeouts_fit(self) -> SmtpSettings:
        if self.send_timeout_seconds < self.data_timeout_seconds:
            raise ValueError("smtp.send_timeout_seconds must be at least smtp.data_timeout_seconds")
        return self

    @model_validator(mode="after")
    def _header_name(self) -> SmtpSettings:
        name = self.idempotency_header
        if name is not None and (not name or any(not (33 <= ord(c) <= 126) or c == ":" for c in name)):
            raise ValueError(f"smtp.idempotency_header {name!r} is not a valid header name")
        return self

    @model_validator(mode="after")
    def _auth_needs_tls(self) -> SmtpSettings:
        if (self.username is None) != (self.password is None):
            raise ValueError("smtp.username and smtp.password must be set together")
        if self.username is not None and self.tls == "none" and not self.allow_plaintext_auth:
            raise ValueError(
                "smtp credentials are set but smtp.tls is 'none': the password would cross the "
                "network in clear text; set OUTBOX_MAILER_SMTP__TLS=starttls or implicit, or "
                "OUTBOX_MAILER_SMTP__ALLOW_PLAINTEXT_AUTH=true if you really mean it"
            )
        return self


class SmtpTransportSettings(SmtpSettings):
    """An additional, named SMTP transport (``OUTBOX_MAILER_TRANSPORTS__<NAME>__KIND=smtp``)."""

    kind: Literal["smtp"]


# Every provider kind is an entry of providers/registry.py (its class says its default base URL and rate).
API_DEFAULT_BASE_URLS = {kind: p.default_base_url for kind, p in API_PROVIDERS.items() if p.default_base_url}
ApiKind = Literal[tuple(API_PROVIDERS)]  # type: ignore[valid-type]  # built from the registry at import; mypy reads only written-out Literals
_IN_HOUSE_KINDS = " or ".join(repr(kind) for kind in API_PROVIDERS if in_house(kind))
_BATCH_KINDS = " and ".join(repr(kind) for kind in BATCH_KINDS)


class ApiTransportSettings(LimitSettings):
    """A provider HTTP API (``resend``, ``postmark``, ``sendgrid``) or an in-house one (``http``);
    its limits and fallback are LimitSettings' (rate_per_second None: Resend 2/s, others unlimited)."""

    kind: ApiKind  # type: ignore[valid-type]  # the Literal above, built from the registry: pydantic checks it
    api_key: SecretStr | None = None  # provider key; for kind=http an optional bearer token
    base_url: str | None = None  # None: the provider's public API
    url: str | None = None  # kind=http: where to POST each email
    signing_secret: SecretStr | None = None  # kind=http: HMAC-SHA256 signature of "timestamp.body"
    timeout_seconds: float = Field(default=30.0, gt=0, le=HOUR)  # whole request; at most 1 h
    max_parallel: int = Field(default=4, ge=1, le=256)  # requests in flight; 1-256
    # Many emails per request where the provider has a batch endpoint: default true for
    # resend (100 per request) and postmark (500), false for the other kinds (true is refused).
    batch: bool = True

    @field_validator("batch")
    @classmethod
    def _batch_needs_an_endpoint(cls, value: bool, info: ValidationInfo) -> bool:
        kind = info.data.get("kind")  # only when set explicitly: the default follows the kind below
        if value and kind is not None and not has_batch_endpoint(kind):
            raise ValueError(f"kind {kind!r} has no batch endpoint: batch=true applies to kind {_BATCH_KINDS} "
                             "only; leave it unset or set it to false")
        return value

    @property
    def send_timeout_seconds(self) -> float:
        return self.timeout_seconds

    @property
    def effective_base_url(self) -> str:
        if in_house(self.kind):
            return self.url or ""
        return (self.base_url or API_DEFAULT_BASE_URLS[self.kind]).rstrip("/")

    @property
    def effective_rate_per_second(self) -> float | None:
        if self.rate_per_second is None:
            return API_PROVIDERS[self.kind].default_rate_per_second  # Resend: its default team limit, 2/s
        return self.rate_per_second

    @model_validator(mode="after")
    def _required_per_kind(self) -> ApiTransportSettings:
        if in_house(self.kind):
            if not self.url or not self.url.startswith(("http://", "https://")):
                raise ValueError(f"a transport of kind {self.kind!r} needs url=http(s)://...")
        elif self.api_key is None:
            raise ValueError(f"a transport of kind {self.kind!r} needs api_key")
        if self.signing_secret is not None and not in_house(self.kind):
            raise ValueError(f"signing_secret applies to kind {_IN_HOUSE_KINDS} only")
        if self.batch and not has_batch_endpoint(self.kind):
            self.batch = False  # the default for a kind without a batch endpoint (an explicit true is refused above)
        return self


TransportSettings = Annotated[SmtpTransportSettings | ApiTransportSettings, Field(discriminator="kind")]
