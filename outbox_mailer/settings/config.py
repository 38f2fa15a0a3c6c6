"""Settings, read from the environment (prefix ``OUTBOX_MAILER_``, nesting ``__``).

Every default and every numeric range is documented next to its field; the
README's settings table mirrors this file. Every number is finite (``inf`` and
``nan`` are refused) and bounded, so a setting that would overflow a timer or a
timestamp at run time fails at start-up instead, naming the variable.
``default_from`` is parsed by the same function as a row's ``from_address``;
``smtp.helo_name`` must be a host name or an address literal; ``database_url``
must be a ``postgresql://`` (or ``postgres://``) URL. Secrets are ``SecretStr`` and can come from files in a
secrets directory (``OUTBOX_MAILER_SECRETS_DIR`` or systemd's
``$CREDENTIALS_DIRECTORY``): a file named ``smtp__password`` holds
``OUTBOX_MAILER_SMTP__PASSWORD``.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import (
    BaseModel,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    NestedSecretsSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from ..errors import CompositionError, ConfigurationError
from ..message.addresses import AddressPolicy, parse_address
from ..message.dkim_signing import DkimSettings
from ..message.message_ids import DEFAULT_SECRET, MessageIdKey
from ..message.staging import ALLOWED_SETTING, REDIRECT_SETTING, allowed_patterns, checked_redirect
from ..providers.registry import TRANSPORT_KINDS
from ..redaction import redacted_url
from ..templating.limits import RenderLimits
from .checks import (
    ListenAddress,
    check_database_url,
    check_fallbacks,
    source_error,
)
from .console import ConsoleSettings
from .events import BounceSettings, SuppressionSettings, UnsubscribeSettings, WebhookSettings
from .limits import DAY, FINITE, HOUR, WEEK
from .names import refuse_unknown_names
from .transports import ApiTransportSettings, SmtpSettings, SmtpTransportSettings, TransportSettings

ENV_PREFIX = "OUTBOX_MAILER_"

# Upper bounds of the numeric settings (with settings/limits.py's): generous for any real
# deployment, small enough that no timer, sleep or timestamp computed from them can overflow.
MAX_RETENTION_DAYS = 3650.0  # ten years
MAX_MESSAGE_BYTES = 256 * 1024 * 1024


class RetrySettings(BaseModel):
    model_config = FINITE

    base_seconds: float = Field(default=30.0, gt=0, le=DAY)  # first retry within [0, base]; at most 1 day
    max_seconds: float = Field(default=3600.0, gt=0, le=WEEK)  # cap of one backoff delay; at most 7 days

    @model_validator(mode="after")
    def _base_le_max(self) -> RetrySettings:
        if self.base_seconds > self.max_seconds:
            raise ValueError("retry.base_seconds must not exceed retry.max_seconds")
        return self


class PruneSettings(BaseModel):
    model_config = FINITE

    scrub_after_days: float = Field(default=30.0, gt=0, le=MAX_RETENTION_DAYS)  # final rows: remove bodies, attachments, headers; at most 10 years
    delete_after_days: float = Field(default=365.0, gt=0, le=MAX_RETENTION_DAYS)  # final rows: delete, with their attempts; at most 10 years
    batch_size: int = Field(default=1000, ge=1, le=100_000)  # rows per short transaction; 1-100000
    interval_seconds: float | None = Field(default=None, gt=0, le=WEEK)  # the daemon prunes this often; None: never; at most 7 days

    @model_validator(mode="after")
    def _scrub_before_delete(self) -> PruneSettings:
        if self.delete_after_days < self.scrub_after_days:
            raise ValueError("prune.delete_after_days must not be shorter than prune.scrub_after_days")
        return self


class TemplateSettings(BaseModel):
    """Rendering stored templates (docs/templates.md): each render runs in a worker process under these limits."""

    model_config = FINITE

    render_timeout_seconds: float = Field(default=2.0, gt=0, le=60)  # one render's wall-clock time; at most 60 s
    memory_limit_bytes: int = Field(default=256 * 1024 * 1024, ge=64 * 1024 * 1024,
                                    le=16 * 1024 ** 3)  # the worker process's address space; 64 MiB-16 GiB
    cache_size: int = Field(default=256, ge=1, le=100_000)  # template versions kept in the daemon's memory; 1-100000


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        case_sensitive=False,
        allow_inf_nan=False,
        hide_input_in_errors=True,  # a ValidationError's text would repeat a secret (a DKIM key, a password)
    )

    database_url: SecretStr | None = None  # postgresql://user:pass@host/db (session-capable)
    # before default_from and redirect_to: their checks use it (address_policy())
    allow_special_use_domains: bool = False  # special-use domains (.local .test .home.arpa ...) allowed; never .invalid
    default_from: str | None = None  # sender when a row's from_address is null
    text_alternative: bool = True  # an HTML-only row also gets a text/plain part made from its HTML
    smtp: SmtpSettings = SmtpSettings()  # the transport named "smtp"
    transports: dict[str, TransportSettings] = {}  # more named transports: TRANSPORTS__<NAME>__KIND=...
    dkim: DkimSettings = DkimSettings()  # DKIM signing of SMTP mail: DKIM__DOMAIN, __SELECTOR, __PRIVATE_KEY, all or none
    default_transport: str = "smtp"  # for rows whose transport is null
    retry: RetrySettings = RetrySettings()
    prune: PruneSettings = PruneSettings()
    templates: TemplateSettings = TemplateSettings()  # TEMPLATES__RENDER_TIMEOUT_SECONDS, __MEMORY_LIMIT_BYTES, __CACHE_SIZE
    max_attempts: int = Field(default=8, ge=1, le=1000)  # when a row's max_attempts is null; 1-1000
    concurrency: int = Field(default=16, ge=1, le=10_000)  # requests in flight or ready per daemon (a batch call is one); 1-10000
    batch_size: int = Field(default=100, ge=1, le=10_000)  # rows per claim; 1-10000
    poll_interval_seconds: float = Field(default=5.0, gt=0, le=HOUR)  # fallback when NOTIFY is missed; at most 1 h
    shutdown_grace_seconds: float = Field(default=30.0, ge=0, le=HOUR)  # finish in-flight sends on SIGTERM; 0-1 h
    database_timeout_seconds: float = Field(default=30.0, ge=1, le=HOUR)  # a daemon statement, or its silent connection; 1 s-1 h
    in_doubt: Literal["resend", "hold"] = "resend"  # ambiguous outcome: resend or hold for an operator
    rescue_after_seconds: float | None = Field(default=None, gt=0, le=DAY)  # None: smtp.send_timeout_seconds + 15; at most 1 day
    rescue_interval_seconds: float = Field(default=15.0, gt=0, le=HOUR)  # how often dead claims are looked for; at most 1 h
    pause_base_seconds: float = Field(default=1.0, gt=0, le=HOUR)  # first pause of an unreachable transport; at most 1 h
    pause_max_seconds: float = Field(default=30.0, gt=0, le=DAY)  # longest pause; doubles up to this while unreachable; at most 1 day
    max_message_bytes: int = Field(default=10 * 1024 * 1024, ge=1024, le=MAX_MESSAGE_BYTES)  # composed size limit; 1 KiB-256 MiB
    message_id_secret: SecretStr | None = None  # HMAC key of new rows' Message-IDs (message_ids.py)
    worker_name: str | None = None  # recorded with each attempt; None: host:pid
    metrics_address: ListenAddress | None = None  # "host:port" for /metrics, /healthz, /readyz; None: no endpoint
    webhooks: WebhookSettings = WebhookSettings()  # `outbox-mailer webhooks`: the provider event receiver
    console: ConsoleSettings = ConsoleSettings()  # `outbox-mailer console`: the operator console
    suppression: SuppressionSettings = SuppressionSettings()
    bounces: BounceSettings = BounceSettings()  # tagged envelope senders (VERP): BOUNCES__ADDRESS, __KEY, __PER_RECIPIENT
    unsubscribe: UnsubscribeSettings = UnsubscribeSettings()  # one-click unsubscribe: UNSUBSCRIBE__BASE_URL, __KEYS
    debug_wedge_file: str | None = None  # while this file exists the claim loop stops: proves a watchdog set-up
    allowed_recipients: str | None = None  # staging guard: only these (addresses, @domain, @*.domain) get mail
    redirect_to: str | None = None  # staging guard: every email goes to this address instead (staging.py)

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            check_database_url(value.get_secret_value())
        return value

    @field_validator("default_from")
    @classmethod
    def _default_from(cls, value: str | None, info: ValidationInfo) -> str | None:
        # the rule of a row's from_address, by the same function (compose.py's _sender)
        if value is not None:
            try:
                parse_address(value, "default_from", _address_policy(info))
            except CompositionError as exc:
                raise ValueError(f"{value!r} is not a valid sender address: {exc.reason}") from None
        return value

    @field_validator("allowed_recipients")
    @classmethod
    def _allowed_recipients(cls, value: str | None) -> str | None:
        if value is not None:
            allowed_patterns(value)  # ValueError naming the bad entry
        return value

    @field_validator("redirect_to")
    @classmethod
    def _redirect_to(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        return checked_redirect(value, _address_policy(info))

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Secret files are named like the variables without the prefix, nested with "__":
        # $CREDENTIALS_DIRECTORY/smtp__password -> smtp.password (pydantic-settings' default
        # source wants "outbox_mailer_smtp" holding JSON instead).
        secrets = NestedSecretsSettingsSource(file_secret_settings, secrets_prefix="", secrets_nested_delimiter="__")
        return init_settings, env_settings, dotenv_settings, secrets

    def all_transports(self) -> dict[str, SmtpSettings | ApiTransportSettings]:
        return {"smtp": self.smtp, **self.transports}

    def message_id_key(self) -> MessageIdKey:
        """What the claim computes Message-IDs with: the secret (else the built-in one) and the default sender."""
        secret = self.message_id_secret
        return MessageIdKey.of(secret.get_secret_value().encode() if secret else DEFAULT_SECRET, self.default_from)

    @property
    def max_send_timeout_seconds(self) -> float:
        return max(t.send_timeout_seconds for t in self.all_transports().values())

    @property
    def effective_rescue_after_seconds(self) -> float:
        if self.rescue_after_seconds is not None:
            return self.rescue_after_seconds
        return self.max_send_timeout_seconds + 15.0

    @model_validator(mode="after")
    def _cross_field(self) -> Settings:
        longest = self.max_send_timeout_seconds
        if self.rescue_after_seconds is not None and self.rescue_after_seconds <= longest + 1:
            raise ValueError(
                f"rescue_after_seconds ({self.rescue_after_seconds:g}) must exceed the longest send timeout "
                f"({longest:g} s) by more than 1 s, or a live send could be rescued"
            )
        if self.allowed_recipients is not None and self.redirect_to is not None:
            raise ValueError(f"{ALLOWED_SETTING} and {REDIRECT_SETTING} are both set: a staging guard allows some "
                             "recipients or redirects all of them, choose one")
        if "smtp" in self.transports:
            raise ValueError("the transport name 'smtp' is taken by the OUTBOX_MAILER_SMTP__* settings")
        for name in self.transports:
            if not name or len(name) > 64 or not name.replace("-", "").replace("_", "").isalnum():
                raise ValueError(f"transport name {name!r}: use 1-64 letters, digits, '-' or '_'")
        check_fallbacks({name: t.fallback for name, t in self.all_transports().items()})
        if self.default_transport not in self.all_transports():
            raise ValueError(
                f"default_transport {self.default_transport!r} is not configured "
                f"(configured: {', '.join(sorted(self.all_transports()))})"
            )
        return self

    def address_policy(self) -> AddressPolicy:
        """What the address parser accepts, for whoever parses a row's addresses (composition, checks)."""
        return AddressPolicy(allow_special_use_domains=self.allow_special_use_domains)

    def render_limits(self) -> RenderLimits:
        """The limits every render of a stored template runs under: the daemon's, the CLI's, the console's."""
        return RenderLimits(self.templates.render_timeout_seconds, self.templates.memory_limit_bytes,
                            self.max_message_bytes)

    def require_database_url(self) -> str:
        if self.database_url is None:
            raise ConfigurationError(
                f"{ENV_PREFIX}DATABASE_URL is not set", setting=f"{ENV_PREFIX}DATABASE_URL"
            )
        return self.database_url.get_secret_value()

    def redacted(self) -> dict[str, Any]:
        """The effective configuration, secrets replaced by '**********'."""
        data = self.model_dump(mode="json")
        if self.database_url is not None:
            data["database_url"] = redacted_url(self.database_url.get_secret_value())
        return data


def _address_policy(info: ValidationInfo) -> AddressPolicy:
    """The policy of OUTBOX_MAILER_ALLOW_SPECIAL_USE_DOMAINS, validated already (it is declared first; the default
    policy if it was invalid)."""
    return AddressPolicy(allow_special_use_domains=bool(info.data.get("allow_special_use_domains", False)))


def _setting_name(loc: tuple[Any, ...]) -> str:
    if len(loc) >= 3 and loc[0] == "transports" and loc[2] in TRANSPORT_KINDS:
        loc = loc[:2] + loc[3:]  # drop pydantic's discriminator tag
    return ENV_PREFIX + "__".join(str(p).upper() for p in loc) if loc else "configuration"


def load_settings(**overrides: Any) -> Settings:
    """Read settings; turn validation errors into one ConfigurationError naming the setting."""
    secrets_dir = os.environ.get(f"{ENV_PREFIX}SECRETS_DIR") or os.environ.get("CREDENTIALS_DIRECTORY")
    kwargs: dict[str, Any] = dict(overrides)
    if secrets_dir:
        if not os.path.isdir(secrets_dir):
            raise ConfigurationError(f"secrets directory {secrets_dir!r} does not exist")
        kwargs["_secrets_dir"] = secrets_dir
    # first: a typo would otherwise surface as some other error, or as none at all
    refuse_unknown_names(Settings, [SmtpTransportSettings, ApiTransportSettings], ENV_PREFIX, secrets_dir)
    try:
        settings = Settings(**kwargs)
    except (UnicodeDecodeError, SettingsError, OSError) as exc:  # a value that could not even be read
        raise source_error(exc, secrets_dir) from None
    except ValidationError as exc:
        lines = []
        first_setting = None
        for err in exc.errors():
            name = _setting_name(tuple(err.get("loc", ())))
            first_setting = first_setting or name
            msg = err.get("msg", "invalid").removeprefix("Value error, ")
            lines.append(f"{name}: {msg}")
        raise ConfigurationError("invalid configuration: " + "; ".join(lines), setting=first_setting) from exc
    return settings
