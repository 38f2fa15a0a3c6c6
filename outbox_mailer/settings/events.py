"""Settings of the webhook receiver (``OUTBOX_MAILER_WEBHOOKS__...``), of suppression and of bounce tags.

Each provider's route is enabled only when its secret is set; a provider left unset answers 404.
Secrets come from the environment or from credential files named like the variables without the
prefix (``webhooks__resend__secret``), as every other secret does.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, SecretStr, field_validator, model_validator

from ..delivery_events.bounce_tags import MAX_LOCAL_OCTETS, BounceAddress
from ..errors import CompositionError
from ..message.addresses import parse_address
from .checks import ListenAddress, Network, NetworkList, parse_networks

FINITE = ConfigDict(allow_inf_nan=False)
_ARN = re.compile(r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_.-]{1,256}$")


class ResendWebhook(BaseModel):
    secret: SecretStr | None = None  # the endpoint's Svix signing secret, whsec_...

    @field_validator("secret")
    @classmethod
    def _secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().startswith("whsec_"):
            raise ValueError("expected the signing secret Resend shows for the endpoint, starting with whsec_")
        return value


class PostmarkWebhook(BaseModel):
    username: str | None = None  # the HTTP basic auth credentials set in the webhook's URL at Postmark
    password: SecretStr | None = None

    @model_validator(mode="after")
    def _both(self) -> PostmarkWebhook:
        if (self.username is None) != (self.password is None):
            raise ValueError("set both USERNAME and PASSWORD, or neither")
        if self.username is not None and not (self.username and self.password.get_secret_value()):  # type: ignore[union-attr]
            raise ValueError("USERNAME and PASSWORD must not be empty")
        return self


class SendgridWebhook(BaseModel):
    public_key: str | None = None  # the Signed Event Webhook's verification key (base64 DER, or PEM)

    @field_validator("public_key")
    @classmethod
    def _key(cls, value: str | None) -> str | None:
        if value is not None:
            from ..delivery_events.sendgrid import (
                load_public_key,  # cryptography: only when it is set
            )

            load_public_key(value)  # ValueError: not a P-256 public key
        return value


class SesWebhook(BaseModel):
    topic_arns: str | None = None  # comma-separated SNS topic ARNs whose notifications are accepted

    @field_validator("topic_arns")
    @classmethod
    def _arns(cls, value: str | None) -> str | None:
        if value is not None:
            bad = [a for a in value.split(",") if not _ARN.match(a.strip())]
            if bad or not value.strip():
                raise ValueError(f"not an SNS topic ARN: {bad[0] if bad else value!r}")
        return value

    def arns(self) -> frozenset[str]:
        return frozenset(a.strip() for a in (self.topic_arns or "").split(",") if a.strip())


class MailgunWebhook(BaseModel):
    signing_key: SecretStr | None = None  # the HTTP webhook signing key of the Mailgun account

    @field_validator("signing_key")
    @classmethod
    def _key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().strip():
            raise ValueError("empty: set the signing key Mailgun shows, or leave the setting out")
        return value


class WebhookSettings(BaseModel):
    model_config = FINITE
    address: ListenAddress | None = None  # "host:port" the receiver listens on; `outbox-mailer webhooks` needs it
    # addresses or networks of the reverse proxies in front, comma-separated: their connections are held to the
    # overall bound only, not to the per-client one (they speak for many clients)
    proxies: NetworkList = "127.0.0.0/8,::1"
    resend: ResendWebhook = ResendWebhook()
    postmark: PostmarkWebhook = PostmarkWebhook()
    sendgrid: SendgridWebhook = SendgridWebhook()
    ses: SesWebhook = SesWebhook()
    mailgun: MailgunWebhook = MailgunWebhook()

    def proxy_networks(self) -> tuple[Network, ...]:
        return parse_networks(self.proxies)

    def enabled(self) -> list[str]:
        """The providers whose route is on."""
        on = {"resend": self.resend.secret is not None, "postmark": self.postmark.username is not None,
              "sendgrid": self.sendgrid.public_key is not None, "ses": bool(self.ses.arns()),
              "mailgun": self.mailgun.signing_key is not None}
        return [name for name, is_on in on.items() if is_on]


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
