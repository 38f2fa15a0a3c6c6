"""The limits a render of a stored template runs under (``worker.py`` applies them). Apart from the renderer,
so that the settings, which every command loads, name them without importing jinja2."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RenderLimits"]


@dataclass(frozen=True, slots=True)
class RenderLimits:
    seconds: float = 2.0  # wall-clock time of one render
    memory_bytes: int = 256 * 1024 * 1024  # the worker process's address space
    max_bytes: int = 10 * 1024 * 1024  # the rendered parts together (MAX_MESSAGE_BYTES)
