"""Settings of the webhook receiver (``OUTBOX_MAILER_WEBHOOKS__...``), of suppression, of bounce tags and of
one-click unsubscribe (``OUTBOX_MAILER_UNSUBSCRIBE__...``).

Each provider's credentials are declared by its webhook scheme (``delivery_events/webhooks.py`` lists
them); its route is enabled only when they are set, and a provider left unset answers 404.
Secrets come from the environment or from credential files named like the variables without the
prefix (``webhooks__resend__secret``), as every other secret does.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, create_model, field_validator, model_validator

from ..delivery_events.bounce_tags import MAX_LOCAL_OCTETS, BounceAddress
from ..delivery_events.model import WebhookScheme
from ..delivery_events.unsubscribe import UnsubscribeKeys, UnsubscribeLinks
from ..delivery_events.webhooks import WEBHOOK_PROVIDERS
from ..errors import CompositionError
from ..message.addresses import parse_address
from .checks import ListenAddress, Network, NetworkList, parse_networks

FINITE = ConfigDict(allow_inf_nan=False)


class WebhookListener(BaseModel):
    """The receiver's own settings; :data:`WebhookSettings` adds each provider's credentials."""

    model_config = FINITE
    address: ListenAddress | None = None  # "host:port" the receiver listens on; `outbox-mailer webhooks` needs it
    # addresses or networks of the reverse proxies in front, comma-separated: their connections are held to the
    # overall bound only, not to the per-client one (they speak for many clients)
    proxies: NetworkList = "127.0.0.0/8,::1"

    def proxy_networks(self) -> tuple[Network, ...]:
        return parse_networks(self.proxies)

    def schemes(self) -> dict[str, WebhookScheme]:
        """Each provider's credentials and scheme, by name, in the registry's order."""
        found = {name: getattr(self, name, None) for name in WEBHOOK_PROVIDERS}
        return {name: scheme for name, scheme in found.items() if isinstance(scheme, WebhookScheme)}

    def enabled(self) -> list[str]:
        """The providers whose route is on."""
        return [name for name, scheme in self.schemes().items() if scheme.enabled()]


# OUTBOX_MAILER_WEBHOOKS__*: the receiver's settings and one field per provider of the registry
# (delivery_events/webhooks.py), named as the provider, holding its credentials (WEBHOOKS__RESEND__SECRET).
if TYPE_CHECKING:  # the type checker sees the fields every WebhookSettings has; providers' through schemes()
    WebhookSettings = WebhookListener
else:
    WebhookSettings = create_model(
        "WebhookSettings", __base__=WebhookListener, __module__=__name__,
        **{name: (scheme, scheme()) for name, scheme in WEBHOOK_PROVIDERS.items()},
    )


class SuppressionSettings(BaseModel):
    automatic: bool = True  # hard bounces and complaints suppress their address (soft bounces never do)


_LOCAL_PART = re.compile(r"[A-Za-z0-9!#$%&'*/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*/=?^_`{|}~-]+)*")
_MIN_KEY_CHARS = 16


class BounceSettings(BaseModel):
    """Tagged envelope senders (VERP, bounce_tags.py): which bounces by mail may suppress."""

    address: str | None = None  # envelope sender base, bounces@example.com: MAIL FROM bounces+TAG@...; None: no tags
    key: SecretStr | None = None  # HMAC key of the tags (credential file bounces__key), at least 16 characters
    previous_key: SecretStr | None = None  # the key before a rotation: its tags still verify
    per_recipient: bool = False  # one SMTP transaction per recipient, each with its recipient's tag

    @field_validator("address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is None:
            return None
        local, at, _domain = value.rpartition("@")
        if not at or not value.isascii() or not _LOCAL_PART.fullmatch(local) or "+" in local:
            raise ValueError(f"{value!r}: expected local@domain, an ASCII local part without '+' (the tag's delimiter)")
        if len(local) > MAX_LOCAL_OCTETS:
            raise ValueError(f"{value!r}: the local part may have {MAX_LOCAL_OCTETS} characters at most, so that "
                             "the tagged one fits in 64")
        try:
            parse_address(value, "bounces.address")
        except CompositionError as exc:
            raise ValueError(f"{value!r} is not a valid address: {exc.reason}") from None
        return value

    @field_validator("key", "previous_key")
    @classmethod
    def _key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value().strip()) < _MIN_KEY_CHARS:
            raise ValueError(f"too short: use at least {_MIN_KEY_CHARS} random characters")
        return value

    @model_validator(mode="after")
    def _key_with_address(self) -> BounceSettings:
        if (self.address is None) != (self.key is None):
            raise ValueError("set ADDRESS and KEY together")
        if self.per_recipient and self.address is None:
            raise ValueError("PER_RECIPIENT needs ADDRESS and KEY")
        return self

    def tags(self) -> BounceAddress | None:
        """The tagged envelope senders to send with and to read bounces by; None when not configured."""
        if self.address is None or self.key is None:
            return None
        keys = [k.get_secret_value().strip().encode() for k in (self.key, self.previous_key) if k is not None]
        return BounceAddress(self.address, keys)


class UnsubscribeSettings(BaseModel):
    """One-click unsubscribe (RFC 8058, docs/unsubscribe.md): the public URL and the tokens' keys."""

    # public https:// URL under which the receiver (`outbox-mailer webhooks`) serves /unsubscribe/TOKEN
    base_url: str | None = None
    # HMAC keys of the tokens, comma-separated, each at least 16 characters (credential file unsubscribe__keys):
    # the first signs, every one listed verifies (rotation: add the new key first, drop the old one later)
    keys: SecretStr | None = None
    validity_days: int = Field(default=365, ge=1, le=3650)  # a token is accepted this long after its message

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme != "https" or not parts.hostname or parts.query or parts.fragment or not value.isascii():
            raise ValueError(f"{value!r}: an https:// URL without query or fragment (mailbox providers POST only "
                             "to https, RFC 8058)")
        return value.rstrip("/")

    @field_validator("keys")
    @classmethod
    def _keys(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and (not _split(value) or any(len(k) < _MIN_KEY_CHARS for k in _split(value))):
            raise ValueError(f"a key is too short: use at least {_MIN_KEY_CHARS} random characters for each")
        return value

    @model_validator(mode="after")
    def _together(self) -> UnsubscribeSettings:
        if (self.base_url is None) != (self.keys is None):
            raise ValueError("set BASE_URL and KEYS together")
        return self

    def enabled(self) -> bool:
        return self.keys is not None

    def signer(self) -> UnsubscribeKeys | None:
        if self.keys is None:
            return None
        return UnsubscribeKeys([k.encode() for k in _split(self.keys)], validity_days=self.validity_days)

    def links(self) -> UnsubscribeLinks | None:
        keys = self.signer()
        return None if keys is None or self.base_url is None else UnsubscribeLinks(self.base_url, keys)


def _split(keys: SecretStr) -> list[str]:
    return [k.strip() for k in keys.get_secret_value().split(",") if k.strip()]
