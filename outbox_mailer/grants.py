"""Least-privilege grants: the statements of ``sql/grants/roles.sql`` with role names filled in."""

from __future__ import annotations

import re

from .errors import ConfigurationError
from .migrations import migrations_dir

_ROLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_$-]{0,62}$")
_VARIABLE = re.compile(r':"(app_role|daemon_role)"')


def quote_role(name: str) -> str:
    if not _ROLE.match(name):
        raise ConfigurationError(f"role name {name!r}: use letters, digits, '_', '$' or '-' (at most 63)")
    return '"' + name + '"'


def grant_statements(app_role: str, daemon_role: str) -> list[str]:
    """The grant script as statements, psql variables replaced by quoted role names."""
    text = migrations_dir().joinpath("grants").joinpath("roles.sql").read_text("utf-8")
    roles = {"app_role": quote_role(app_role), "daemon_role": quote_role(daemon_role)}
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
    body = _VARIABLE.sub(lambda m: roles[m.group(1)], "\n".join(lines))
    return [stmt.strip() for stmt in body.split(";") if stmt.strip()]
