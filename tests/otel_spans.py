"""The ``spans`` fixture: OpenTelemetry's SDK set as the process's tracer provider for one test, its spans kept
in memory (``InMemorySpanExporter``), and the process left as it was (no provider) after the test.

OpenTelemetry sets the global provider once per process; the fixture resets it as OpenTelemetry's own test
utilities do, so that the tests before and after it run untraced. Registered as a plugin, this module imports
nothing of OpenTelemetry until a test asks for the fixture: the other tests run as a process that never
imported it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class Spans:
    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self.exporter = exporter

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name == name]


def _unset() -> None:
    from opentelemetry import trace
    from opentelemetry.util._once import Once

    trace._TRACER_PROVIDER_SET_ONCE = Once()  # what opentelemetry.test's reset_trace_globals does
    trace._TRACER_PROVIDER = None


@pytest.fixture
def spans() -> Iterator[Spans]:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _unset()
    trace.set_tracer_provider(provider)
    try:
        yield Spans(exporter)
    finally:
        _unset()
        provider.shutdown()


def traceparent_of(span: ReadableSpan) -> str:
    context = span.get_span_context()
    assert context is not None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
