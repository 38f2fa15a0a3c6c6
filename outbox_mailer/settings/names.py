"""Every ``OUTBOX_MAILER_*`` variable, ``.env`` entry and credential file must name a setting.

pydantic-settings ignores what it does not know, so ``OUTBOX_MAILER_SMTP__PASWORD`` would leave
the daemon running without its password. :func:`unknown_names` lists such names (with the
closest known one), and :func:`refuse_unknown_names` (config.py's load_settings) refuses them. The names come from the settings models themselves:
a field, a nested model's field (``SMTP__PASSWORD``, ``WEBHOOKS__RESEND__SECRET``), a whole
model as JSON (``SMTP``), and for the named transports ``TRANSPORTS__<NAME>`` and
``TRANSPORTS__<NAME>__<FIELD>`` with a field of either transport kind. Two variables the project
documents for other uses are known too.
"""

from __future__ import annotations

import difflib
import os
import types
import typing
from collections.abc import Iterable
from pathlib import Path

from dotenv import dotenv_values
from pydantic import BaseModel

from ..errors import ConfigurationError

OTHER_NAMES = frozenset({"SECRETS_DIR", "TEST_DATABASE_URL"})  # the secrets directory; the test suite's server
TRANSPORTS = "TRANSPORTS"


def _models(annotation: object) -> list[type[BaseModel]]:
    """The pydantic models an annotation may hold (``X``, ``X | None``, a discriminated union)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if typing.get_origin(annotation) is typing.Annotated:
        return _models(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _models(arg)]
    return []


def _field_names(model: type[BaseModel], prefix: str = "") -> set[str]:
    names: set[str] = set()
    for name, field in model.model_fields.items():
        key = prefix + name.upper()
        names.add(key)
        for inner in _models(field.annotation):
            names |= _field_names(inner, key + "__")
    return names


class SettingNames:
    """The names a settings class accepts, without the prefix, upper case."""

    def __init__(self, settings_cls: type[BaseModel], transport_models: Iterable[type[BaseModel]]) -> None:
        self.fixed = _field_names(settings_cls) | OTHER_NAMES
        self.transport_fields = set().union(*(_field_names(m) for m in transport_models))

    def known(self, name: str) -> bool:
        if name in self.fixed:
            return True
        head, _, rest = name.partition("__")
        if head != TRANSPORTS or not rest:
            return False
        transport, _, field = rest.partition("__")
        return bool(transport) and (not field or field in self.transport_fields)

    def closest(self, name: str) -> str | None:
        head, _, rest = name.partition("__")
        candidates = set(self.fixed)
        if head == TRANSPORTS and rest:
            transport = rest.partition("__")[0]
            candidates |= {f"{TRANSPORTS}__{transport}__{f}" for f in self.transport_fields}
        found = difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=0.75)
        return found[0] if found else None


def refuse_unknown_names(settings_cls: type[BaseModel], transport_models: Iterable[type[BaseModel]], prefix: str,
                         secrets_dir: str | None) -> None:
    """ConfigurationError naming every variable (environment, ``.env``) or credential file that is
    not a setting (python-dotenv reads ``.env`` as pydantic-settings does)."""
    try:
        dotenv = dotenv_values(".env", encoding="utf-8") if os.path.isfile(".env") else {}
    except (OSError, UnicodeDecodeError):
        dotenv = {}  # reading the settings reports it, naming the file
    unknown = unknown_names(SettingNames(settings_cls, transport_models), prefix, os.environ, dotenv, secrets_dir)
    if unknown:
        raise ConfigurationError("not a setting: " + "; ".join(d for _, d in unknown) + " (fix the name, or remove it)",
                                 setting=unknown[0][0])


def unknown_names(names: SettingNames, prefix: str, environ: typing.Mapping[str, str],
                  dotenv: typing.Mapping[str, str | None], secrets_dir: str | None) -> list[tuple[str, str]]:
    """Each name that is not a setting, and its description: ``OUTBOX_MAILER_X (did you mean ...?)``."""
    found: list[tuple[str, str]] = []  # (how to name it, the name without the prefix)
    for source in (environ, dotenv):
        for key in source:
            upper = key.upper()
            if upper.startswith(prefix) and not names.known(upper[len(prefix):]):
                found.append((key, upper[len(prefix):]))
    if secrets_dir:
        for path in sorted(Path(secrets_dir).iterdir()):
            if path.is_file() and not path.name.startswith(".") and not names.known(path.name.upper()):
                found.append((f"credential file {path}", path.name.upper()))
    described: list[tuple[str, str]] = []
    for shown, bare in found:
        close = names.closest(bare)
        hint = ""
        if close is not None:
            hint = f" (did you mean {close.lower()!r}?)" if shown.startswith("credential") else \
                f" (did you mean {prefix}{close}?)"
        described.append((shown, f"{shown}{hint}"))
    return described
