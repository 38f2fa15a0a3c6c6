"""One template version rendered with one row's data, in the process that calls it (worker.py runs it in
a process of its own, with time and memory limits).

Each part is compiled in :class:`~outbox_mailer.templating.sandbox.TemplateSandbox` (the HTML body
autoescaped) and streamed (``generate()``): the output is counted as it comes and cut off, as an error,
once the parts together pass ``max_bytes`` (the daemon's ``MAX_MESSAGE_BYTES``). The same version and data
always give the same text: the context is the data alone, and the sandbox offers no clock and no randomness.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from jinja2 import Template, UndefinedError
from jinja2 import TemplateError as JinjaError
from jinja2.exceptions import SecurityError

from ..errors import TemplateError
from .sandbox import TemplateSandbox

__all__ = ["Rendered", "TemplateVersion", "render"]

COMPILED_CACHE = 128  # compiled parts kept per process, by their source


@dataclass(frozen=True, slots=True)
class TemplateVersion:
    """One immutable version of a stored template (a row of ``email_templates``)."""

    name: str
    locale: str
    version: int
    subject: str
    text_body: str | None
    html_body: str | None

    @property
    def key(self) -> tuple[str, str, int]:
        return self.name, self.locale, self.version

    def describe(self) -> str:
        return f"{self.name} ({self.locale}, version {self.version})"


@dataclass(frozen=True, slots=True)
class Rendered:
    """What a version renders to with one row's data: what composition receives."""

    subject: str
    text_body: str | None
    html_body: str | None


@lru_cache(maxsize=COMPILED_CACHE)
def _compiled(source: str, html: bool, max_bytes: int) -> Template:
    return TemplateSandbox(html=html, max_bytes=max_bytes).from_string(source)


def render(version: TemplateVersion, data: Mapping[str, Any], max_bytes: int) -> Rendered:
    """The version's parts rendered with ``data``, or :class:`TemplateError` saying why not."""
    left = [max_bytes]
    subject = _part(version.subject, "subject", data, left, max_bytes)
    text = None if version.text_body is None else _part(version.text_body, "text", data, left, max_bytes)
    html = None if version.html_body is None else _part(version.html_body, "html", data, left, max_bytes,
                                                        html=True)
    return Rendered(subject, text, html)


def _part(source: str, part: str, data: Mapping[str, Any], left: list[int], max_bytes: int, *,
          html: bool = False) -> str:
    try:
        template = _compiled(source, html, max_bytes)
        chunks = []
        for chunk in template.generate(dict(data)):
            left[0] -= len(chunk.encode("utf-8", "surrogatepass"))
            if left[0] < 0:
                raise TemplateError(f"template: output over MAX_MESSAGE_BYTES ({max_bytes} bytes)")
            chunks.append(chunk)
    except UndefinedError as exc:
        raise TemplateError(f"template {part}: undefined variable: {exc.message}") from None
    except SecurityError as exc:
        raise TemplateError(f"template {part}: refused by the sandbox: {exc}") from None
    except JinjaError as exc:
        raise TemplateError(f"template {part}: {type(exc).__name__}: {exc}") from None
    except MemoryError:
        raise TemplateError("template: render exceeded memory") from None
    except Exception as exc:  # noqa: BLE001 - whatever a filter or the data raises fails the row, never the daemon
        raise TemplateError(f"template {part}: {type(exc).__name__}: {exc}") from None
    return "".join(chunks)
