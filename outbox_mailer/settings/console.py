"""Settings of the operator console (``OUTBOX_MAILER_CONSOLE__...``).

The console signs users in from ``email_console_users``, or, behind an authenticating reverse proxy,
takes the user name from ``TRUSTED_PROXY_HEADER``, honoured only on connections from
``TRUSTED_PROXIES`` (or on its Unix socket, ``SOCKET``). It refuses to start on a non-loopback address
with neither configured (:meth:`ConsoleSettings.proxy_mode` and ``outbox-mailer console``), and refuses
a trusted network wider than one host unless ``ALLOW_WIDE_PROXY_NETWORK`` says so.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from .checks import ListenAddress, Network, NetworkList, parse_networks
from .limits import HOUR, WEEK

_HEADER = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")  # an HTTP field name (RFC 9110 token)


class ConsoleSettings(BaseModel):
    model_config = ConfigDict(allow_inf_nan=False)
    address: ListenAddress | None = None  # "host:port" the console listens on; `outbox-mailer console` needs it (or SOCKET)
    socket: str | None = None  # a Unix socket's path to listen on instead (mode 0660): only your proxy reaches it
    trusted_proxy_header: str | None = None  # e.g. X-Forwarded-User: the signed-in user, set by your proxy
    trusted_proxies: NetworkList | None = None  # comma-separated addresses or networks that header is taken from
    forwarded_for_proxies: NetworkList | None = None  # proxies believed about X-Forwarded-For and X-Forwarded-Proto
    allow_wide_proxy_network: bool = False  # a trusted network of more than one address: only when you mean it
    allowed_hosts: str | None = None  # comma-separated Host names (host or host:port) the console answers to
    scheme: Literal["http", "https"] | None = None  # the scheme browsers use; None: X-Forwarded-Proto or the connection's
    signing_key: SecretStr | None = None  # signs forms and CSRF tokens (credential console__signing_key); None: per process
    sign_in_concurrency: int = Field(default=2, ge=1, le=16)  # password checks at once (64 MiB each)
    sign_in_queue: int = Field(default=16, ge=0, le=1000)  # sign-ins waiting for a check; beyond: 429
    sign_in_per_client: int = Field(default=2, ge=1, le=100)  # places (checking or waiting) of one client address
    proxy_role: Literal["viewer", "operator"] = "viewer"  # the role of a proxy user not in email_console_users
    session_seconds: float = Field(default=8 * HOUR, ge=60, le=WEEK)  # a session ends this long after sign-in
    idle_seconds: float = Field(default=HOUR, ge=60, le=WEEK)  # ... or after this long without a request
    census_seconds: float = Field(default=60, ge=0, le=HOUR)  # counts by status need a whole-table scan: at most this often; 0: every request

    @field_validator("trusted_proxy_header")
    @classmethod
    def _header(cls, value: str | None) -> str | None:
        if value is not None and not _HEADER.match(value):
            raise ValueError(f"not an HTTP header name: {value!r}")
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts(cls, value: str | None) -> str | None:
        if value is not None and not allowed_host_names(value):
            raise ValueError("no host name given")
        return value

    @field_validator("signing_key")
    @classmethod
    def _key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            keys = value.get_secret_value().split()
            if not keys or any(len(k) < 32 for k in keys):
                raise ValueError("each signing key has at least 32 characters (keys separated by white space)")
        return value

    @model_validator(mode="after")
    def _both(self) -> ConsoleSettings:
        if self.trusted_proxy_header is None and self.trusted_proxies is not None:
            raise ValueError("TRUSTED_PROXIES without TRUSTED_PROXY_HEADER")
        if self.trusted_proxy_header is not None and self.trusted_proxies is None and self.socket is None:
            raise ValueError("set TRUSTED_PROXIES with TRUSTED_PROXY_HEADER (or listen on SOCKET, which only the "
                             "proxy reaches)")
        if self.address is not None and self.socket is not None:
            raise ValueError("set ADDRESS or SOCKET, not both")
        if not self.allow_wide_proxy_network:
            for name, networks in (("TRUSTED_PROXIES", self.proxy_networks()),
                                   ("FORWARDED_FOR_PROXIES", self.forwarding_networks())):
                wide = [str(n) for n in networks if n.num_addresses > 1]
                if wide:
                    raise ValueError(f"{name} holds {', '.join(wide)}, more than one address: any host there could "
                                     "name any user or client; list the proxy's own addresses, or set "
                                     "ALLOW_WIDE_PROXY_NETWORK=true")
        return self

    def proxy_networks(self) -> tuple[Network, ...]:
        return parse_networks(self.trusted_proxies) if self.trusted_proxies else ()

    def forwarding_networks(self) -> tuple[Network, ...]:
        return parse_networks(self.forwarded_for_proxies) if self.forwarded_for_proxies else ()

    @property
    def proxy_mode(self) -> bool:
        return self.trusted_proxy_header is not None


def allowed_host_names(text: str) -> tuple[str, ...]:
    """``"console.example.com, console.example.com:8443"`` as lower-case names."""
    return tuple(e.strip().lower() for e in text.split(",") if e.strip())
