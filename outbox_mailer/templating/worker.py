"""Rendering where it can be stopped: a worker process with a time and a memory limit.

The sandbox bounds what a template may touch, not what it may cost: a loop over the data, or nested
ranges, can run for minutes, and a render that blocked the daemon's event loop would get it killed by its
watchdog and the row rescued and rendered again by the next daemon. So :func:`render_isolated` renders in a
process of anyio's worker pool (``to_process.run_sync(..., cancellable=True)``): the worker sets its own
address-space limit (``RLIMIT_AS``) before rendering, and a render that takes longer than the time limit is
cancelled, which kills that process (the next render starts a new one). Every limit hit is a
:class:`~outbox_mailer.errors.TemplateError` with a clear reason ("render exceeded 2 s", "render exceeded
memory", "output over MAX_MESSAGE_BYTES"); the daemon fails that row permanently and goes on.

The time limit counts the render alone: a process is started and warmed (jinja2 imported, the limit set)
first, outside it. One render at a time (a process of its own costs about 30 MB); a render takes
milliseconds.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Mapping
from typing import Any

import anyio
from anyio import CapacityLimiter, to_process

from ..errors import TemplateError
from .limits import RenderLimits
from .render import Rendered, TemplateVersion, render

__all__ = ["RenderLimits", "render_isolated"]

_limiter: CapacityLimiter | None = None


def _limit_memory(memory_bytes: int) -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    wanted = memory_bytes if hard == resource.RLIM_INFINITY else min(memory_bytes, hard)
    resource.setrlimit(resource.RLIMIT_AS, (wanted, hard))


def _warm(memory_bytes: int) -> None:
    """In the worker: its memory limit set, the renderer imported (this module's imports), and the daemon's
    environment (its database URL, API keys) dropped: a render needs none of it."""
    os.environ.clear()
    _limit_memory(memory_bytes)


def _render_in_worker(version: TemplateVersion, data: dict[str, Any], limits: RenderLimits) -> Rendered | str:
    """In the worker: the rendered parts, or why not (a string: it crosses the process boundary as is)."""
    _limit_memory(limits.memory_bytes)
    try:
        return render(version, data, limits.max_bytes)
    except TemplateError as exc:
        return exc.reason
    except MemoryError:
        return "template: render exceeded memory"


async def render_isolated(version: TemplateVersion, data: Mapping[str, Any], limits: RenderLimits) -> Rendered:
    """``version`` rendered with ``data`` in a worker process under ``limits``, or :class:`TemplateError`."""
    global _limiter
    if _limiter is None:
        _limiter = anyio.CapacityLimiter(1)
    async with _limiter:
        try:
            await to_process.run_sync(_warm, limits.memory_bytes, cancellable=True)
            with anyio.fail_after(limits.seconds):
                result = await to_process.run_sync(_render_in_worker, version, dict(data), limits, cancellable=True)
        except TimeoutError:
            raise TemplateError(f"template: render exceeded {limits.seconds:g} s") from None
        except MemoryError:
            raise TemplateError("template: render exceeded memory") from None
        except anyio.BrokenWorkerProcess:
            raise TemplateError("template: the render's process ended (render exceeded memory?)") from None
    if isinstance(result, str):
        raise TemplateError(result)
    return result
