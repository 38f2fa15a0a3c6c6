"""The DNS host name rule: DKIM's domain and selector, and the EHLO name the settings check."""

from __future__ import annotations

import re

__all__ = ["is_host_name"]

# LDH labels of at most 63 characters, no trailing dot, ASCII (punycode for IDN).
_LDH_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?", re.ASCII)


def is_host_name(value: str) -> bool:
    """Whether ``value`` is a DNS host name: LDH labels of 1-63 characters, 253 in all, no trailing dot, ASCII."""
    return 0 < len(value) <= 253 and all(_LDH_LABEL.fullmatch(label) for label in value.split("."))
