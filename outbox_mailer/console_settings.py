"""Settings of the operator console (``OUTBOX_MAILER_CONSOLE__...``).

The console signs users in from ``email_console_users``, or, behind an authenticating reverse proxy,
takes the user name from ``TRUSTED_PROXY_HEADER``, honoured only on connections from
``TRUSTED_PROXIES``. It refuses to start on a non-loopback address with neither configured
(:meth:`ConsoleSettings.proxy_mode` and ``outbox-mailer console``).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .config_checks import parse_listen_address
from .limit_settings import HOUR, WEEK

_HEADER = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")  # an HTTP field name (RFC 9110 token)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class ConsoleSettings(BaseModel):
    model_config = ConfigDict(allow_inf_nan=False)
    address: str | None = None  # "host:port" the console listens on; `outbox-mailer console` needs it
    trusted_proxy_header: str | None = None  # e.g. X-Forwarded-User: the signed-in user, set by your proxy
    trusted_proxies: str | None = None  # comma-separated addresses or networks that header is taken from
    proxy_role: Literal["viewer", "operator"] = "viewer"  # the role of a proxy user not in email_console_users
    session_seconds: float = Field(default=8 * HOUR, ge=60, le=WEEK)  # a session ends this long after sign-in
    idle_seconds: float = Field(default=HOUR, ge=60, le=WEEK)  # ... or after this long without a request
    census_seconds: float = Field(default=60, ge=0, le=HOUR)  # counts by status need a whole-table scan: at most this often; 0: every request

    @field_validator("address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is not None:
            parse_listen_address(value)
        return value

    @field_validator("trusted_proxy_header")
    @classmethod
    def _header(cls, value: str | None) -> str | None:
        if value is not None and not _HEADER.match(value):
            raise ValueError(f"not an HTTP header name: {value!r}")
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies(cls, value: str | None) -> str | None:
        if value is not None:
            parse_networks(value)
        return value

    @model_validator(mode="after")
    def _both(self) -> ConsoleSettings:
        if (self.trusted_proxy_header is None) != (self.trusted_proxies is None):
            raise ValueError("set both TRUSTED_PROXY_HEADER and TRUSTED_PROXIES, or neither")
        return self

    def proxy_networks(self) -> tuple[Network, ...]:
        return parse_networks(self.trusted_proxies) if self.trusted_proxies else ()

    @property
    def proxy_mode(self) -> bool:
        return self.trusted_proxy_header is not None


def parse_networks(text: str) -> tuple[Network, ...]:
    """``"127.0.0.1, 10.0.0.0/8, ::1"`` as networks; ValueError naming the first bad entry."""
    entries = [e.strip() for e in text.split(",") if e.strip()]
    if not entries:
        raise ValueError("no address or network given")
    networks = []
    for entry in entries:
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(f"not an IP address or network: {entry!r}") from None
    return tuple(networks)
