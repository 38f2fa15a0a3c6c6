"""Least-privilege grants: the statements of ``sql/grants/roles.sql`` (and, for the operator console,
``sql/grants/console_role.sql``) with role names filled in."""

from __future__ import annotations

import re

from ..errors import ConfigurationError
from .migrations import migrations_dir

_ROLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_$-]{0,62}$")
_VARIABLE = re.compile(r':"(app_role|daemon_role|console_role)"')


def quote_role(name: str) -> str:
    if not _ROLE.match(name):
        raise ConfigurationError(f"role name {name!r}: use letters, digits, '_', '$' or '-' (at most 63)")
    return '"' + name + '"'


def _script(file: str, roles: dict[str, str]) -> list[str]:
    text = migrations_dir().joinpath("grants").joinpath(file).read_text("utf-8")
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
    body = _VARIABLE.sub(lambda m: roles[m.group(1)], "\n".join(lines))
    return [stmt.strip() for stmt in body.split(";") if stmt.strip()]


def grant_statements(app_role: str, daemon_role: str, console_role: str | None = None) -> list[str]:
    """The grant scripts as statements, psql variables replaced by quoted role names. With
    ``console_role``, the role is created first (LOGIN, no password) unless it exists."""
    roles = {"app_role": quote_role(app_role), "daemon_role": quote_role(daemon_role)}
    statements = _script("roles.sql", roles)
    if console_role is not None:
        quoted = quote_role(console_role)  # letters, digits, _ $ -: no quote to escape in the literal below
        statements.append(f"DO 'BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = ''{console_role}'') "
                          f"THEN CREATE ROLE {quoted} LOGIN; END IF; END'")
        statements += _script("console_role.sql", {"console_role": quoted})
    return statements
