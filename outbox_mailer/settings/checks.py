"""Checks of single setting values, and the translation of errors raised while reading settings.

Used by :mod:`outbox_mailer.settings.config`: the EHLO name and database URL rules
(see there; the host name rule is :func:`outbox_mailer.message.host_names.is_host_name`,
which DKIM's domain and selector follow too), and :func:`source_error`, which turns what
pydantic-settings raises before validation (a nested setting that is not JSON, a ``.env`` or
secret file that is not UTF-8) into one ConfigurationError naming the
variable or the file.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator

from ..errors import ConfigurationError
from ..message.host_names import is_host_name


def check_helo_name(value: str) -> str:
    """``value`` when it is a host name or an address literal; ValueError otherwise: the RFC 5321
    EHLO argument, a Domain or an address literal ([192.0.2.1], [IPv6:2001:db8::1])."""
    if value.startswith("[") and value.endswith("]"):
        inner = value[1:-1]
        try:
            if inner[:5].lower() == "ipv6:":
                ipaddress.IPv6Address(inner[5:])
            else:
                ipaddress.IPv4Address(inner)
        except ValueError:
            raise ValueError(f"{value!r} is not an address literal like [192.0.2.1] or [IPv6:2001:db8::1]") from None
        return value
    if not is_host_name(value):
        raise ValueError(
            f"{value!r} is not a host name (letters, digits and '-' in dot-separated labels; punycode for "
            "non-ASCII names) or an address literal like [192.0.2.1]"
        )
    return value


def check_database_url(value: str) -> None:
    """ValueError unless ``value`` looks like a PostgreSQL URL; never repeats the value (it holds a password)."""
    scheme, sep, _ = value.partition("://")
    if not sep or scheme.lower() not in ("postgresql", "postgres"):
        raise ValueError("expected a URL like postgresql://user:password@host:5432/dbname "
                         "(scheme postgresql:// or postgres://)")
    if any(c.isspace() or not c.isprintable() for c in value):
        raise ValueError("the URL contains white space or control characters (percent-encode them, e.g. %20)")
    try:
        urlsplit(value)
    except ValueError as exc:
        raise ValueError(f"not a valid URL: {exc}") from None


def undecodable_file(secrets_dir: str | None) -> str | None:
    """The settings file (.env or a secret file) that is not UTF-8, if any."""
    candidates = [Path(".env")]
    if secrets_dir:
        candidates += sorted(p for p in Path(secrets_dir).iterdir() if p.is_file())
    for path in candidates:
        try:
            path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            return str(path)
        except OSError:
            continue
    return None


_SOURCE_FIELD = re.compile(r'field "([^"]+)" from source "([^"]+)"')


def credential_setting(path: str | None, secrets_dir: str | None) -> str | None:
    """The setting a file of the secrets directory holds (``.../dkim__private_key``: OUTBOX_MAILER_DKIM__PRIVATE_KEY)."""
    if path is None or not secrets_dir or Path(path).parent != Path(secrets_dir):
        return None
    return "OUTBOX_MAILER_" + Path(path).name.upper()


def source_error(exc: Exception, secrets_dir: str | None) -> ConfigurationError:
    """One clear line for a value pydantic-settings could not even read (bad JSON, an undecodable or
    unreadable file), naming the setting a credential file holds."""
    if isinstance(exc, OSError):
        path = None if exc.filename is None else str(exc.filename)
        name = credential_setting(path, secrets_dir)
        return ConfigurationError(f"invalid configuration: {name + ': ' if name else ''}cannot read "
                                  f"{path or 'a settings file'}: {exc.strerror or exc}", setting=name or path)
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, UnicodeDecodeError):
        cause = cause.__cause__ or cause.__context__
    if isinstance(cause, UnicodeDecodeError):
        culprit = undecodable_file(secrets_dir)
        name = credential_setting(culprit, secrets_dir)
        return ConfigurationError(f"{culprit or 'a settings file'}{f' ({name})' if name else ''} is not valid UTF-8 "
                                  f"({cause.reason} at byte {cause.start})", setting=name or culprit)
    match = _SOURCE_FIELD.search(str(exc))
    if match is None:
        return ConfigurationError(f"invalid configuration: {exc}")
    name = "OUTBOX_MAILER_" + match.group(1).upper()
    where = {"DotEnvSettingsSource": " (in .env)"}.get(match.group(2), "")
    if "Secrets" in match.group(2):
        where = f" (a file in {secrets_dir})"
    if not str(exc).startswith("error parsing value"):
        reason = exc.__cause__ or exc
        return ConfigurationError(f"invalid configuration: {name}{where}: cannot be read: {reason}", setting=name)
    return ConfigurationError(
        f"invalid configuration: {name}{where}: not valid JSON; a nested setting given as one variable must be "
        f"a JSON object (or set its parts one by one: {name}__<FIELD>)", setting=name)


def parse_listen_address(value: str) -> tuple[str, int]:
    """Split ``host:port`` (or ``[v6-address]:port``) into (host, port); ValueError when malformed."""
    host, sep, port_text = value.partition(":") if not value.startswith("[") else value[1:].partition("]:")
    if value.startswith("[") and ":" not in host:
        host = ""  # brackets are for IPv6 addresses only
    if not sep or not host or any(c.isspace() or c in "/[]" for c in host) or ":" in port_text:
        raise ValueError(f"{value!r}: expected host:port, e.g. 127.0.0.1:9464 or [::1]:9464")
    if not (port_text.isascii() and port_text.isdigit()) or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"{value!r}: the port must be a number from 1 to 65535")
    return host, int(port_text)


def _listen_address(value: str) -> str:
    parse_listen_address(value)
    return value


# a setting that names where a server listens (METRICS_ADDRESS, CONSOLE__ADDRESS, WEBHOOKS__ADDRESS)
ListenAddress = Annotated[str, AfterValidator(_listen_address)]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


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


def _network_list(value: str) -> str:
    parse_networks(value)
    return value


# a setting that lists proxies' addresses or networks, comma-separated (the console's, the receiver's)
NetworkList = Annotated[str, AfterValidator(_network_list)]


def fallback_setting(name: str) -> str:
    return "OUTBOX_MAILER_SMTP__FALLBACK" if name == "smtp" else f"OUTBOX_MAILER_TRANSPORTS__{name.upper()}__FALLBACK"


def check_fallbacks(fallbacks: dict[str, str | None]) -> None:
    """Each transport's fallback names a configured transport, and no chain comes back to itself."""
    for name, fallback in fallbacks.items():
        if fallback is None:
            continue
        if fallback not in fallbacks:
            raise ValueError(f"{fallback_setting(name)}: unknown transport {fallback!r} "
                             f"(configured: {', '.join(sorted(fallbacks))})")
        chain = [name]
        while fallback is not None:
            if fallback in chain:
                raise ValueError(f"{fallback_setting(name)}: the fallbacks loop: {' -> '.join([*chain, fallback])}")
            chain.append(fallback)
            fallback = fallbacks[fallback]


def unsigned_unsubscribe(smtp_transports: list[str], dkim_signs: bool) -> str | None:
    """The warning ``check`` gives when one-click unsubscribe is on and SMTP transports send unsigned: RFC 8058
    asks for a DKIM signature covering List-Unsubscribe and List-Unsubscribe-Post, and mailbox providers
    ignore the headers without it. None when nothing sends unsigned (provider APIs sign with the account's
    domain keys)."""
    if dkim_signs or not smtp_transports:
        return None
    return (f"the SMTP transport(s) {', '.join(smtp_transports)} send without a DKIM signature, so mailbox "
            "providers may ignore List-Unsubscribe (RFC 8058 asks for one covering it): set "
            "OUTBOX_MAILER_DKIM__DOMAIN, __SELECTOR and __PRIVATE_KEY")
