"""Rendering in a worker process (outbox_mailer/templating/worker.py): a render past the time limit is stopped
(its process killed, the next render served by a new one), one past the memory limit fails as such, and
neither takes the caller down."""

from __future__ import annotations

import pytest

from outbox_mailer.errors import TemplateError
from outbox_mailer.templating.render import Rendered, TemplateVersion
from outbox_mailer.templating.worker import RenderLimits, render_isolated

pytestmark = pytest.mark.anyio

NESTED = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}done"
HUNGRY = "{% set a = [0] * 10000000 %}{% set b = [1] * 10000000 %}{% set c = [2] * 10000000 %}{{ a|length }}"


def version(text: str) -> TemplateVersion:
    return TemplateVersion("t", "en", 1, "Hi", text, None)


async def test_a_render_past_the_time_limit_is_stopped_and_the_next_render_is_served() -> None:
    with pytest.raises(TemplateError, match=r"render exceeded 0\.5 s"):
        await render_isolated(version(NESTED), {}, RenderLimits(seconds=0.5))
    assert await render_isolated(version("Hello {{ name }}"), {"name": "Ann"}, RenderLimits()) == Rendered(
        "Hi", "Hello Ann", None)


async def test_a_render_past_the_memory_limit_fails_as_such() -> None:
    with pytest.raises(TemplateError, match="render exceeded memory"):
        await render_isolated(version(HUNGRY), {}, RenderLimits(memory_bytes=192 * 1024 * 1024))
    assert (await render_isolated(version("{{ name }}"), {"name": "Bo"}, RenderLimits())).text_body == "Bo"


async def test_an_undefined_variable_crosses_the_process_boundary_named() -> None:
    with pytest.raises(TemplateError, match="'first_name' is undefined"):
        await render_isolated(version("{{ first_name }}"), {}, RenderLimits())
