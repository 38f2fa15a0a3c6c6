"""Where a request really comes from, behind a reverse proxy: the client's address and the scheme.

A proxy of ``FORWARDED_FOR_PROXIES`` (or any peer of the console's Unix socket, which only the proxy
can reach) is believed about the client: the address is the rightmost ``X-Forwarded-For`` entry that
is not itself such a proxy, and the scheme is the last ``X-Forwarded-Proto`` value. From any other
peer both headers are ignored: the address is the peer's, the scheme the connection's. ``SCHEME``,
when set, is the scheme whatever the headers say.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from ..settings.checks import Network

UNIX_PEER = "unix"  # the address of a peer of the Unix socket


@dataclass(frozen=True, slots=True)
class Origin:
    """The request's real client address and scheme, and whether its peer is a forwarding proxy."""

    address: str
    scheme: str
    by_proxy: bool


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def in_networks(peer: str | None, networks: tuple[Network, ...]) -> bool:
    address = _ip(peer) if peer else None
    return address is not None and any(address in n for n in networks)


def request_origin(peer: str | None, forwarded_for: str | None, forwarded_proto: str | None, connection_scheme: str,
                   *, proxies: tuple[Network, ...], unix: bool, scheme: str | None) -> Origin:
    """``peer``: the connection's address (None on the Unix socket)."""
    trusted = (unix and peer is None) or in_networks(peer, proxies)
    address = peer or UNIX_PEER
    if trusted and forwarded_for:
        for entry in reversed([e.strip() for e in forwarded_for.split(",") if e.strip()]):
            ip = _ip(entry)
            address = str(ip) if ip is not None else entry[:64]
            if ip is None or not any(ip in n for n in proxies):
                break
    proto = forwarded_proto.split(",")[-1].strip().lower() if trusted and forwarded_proto else None
    found = scheme or (proto if proto in ("http", "https") else connection_scheme)
    return Origin(address, found, trusted)
