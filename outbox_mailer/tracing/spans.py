"""The spans that continue an email's trace (docs/tracing.md); the package's one importer of OpenTelemetry.

:func:`configured` answers a :class:`Tracing` only in a process that has imported OpenTelemetry already and set
a tracer provider (``opentelemetry-instrument outbox-mailer run``, or an application that embeds the daemon);
otherwise None, having imported nothing: the daemon and the receiver then check one ``is None`` per attempt or
event. Spans follow OpenTelemetry's messaging semantic conventions (:data:`SEMCONV`, status "Development"):

* one span per attempt, ``send <transport>``, kind PRODUCER, child of the row's traceparent (a root span when
  it has none, or one written past the INSERT's check);
* one span per provider batch request, ``send <transport>``, kind CLIENT, linked to each member's traceparent
  (several traces share one operation: links, not a parent);
* one span per delivery event recorded for a row, ``process <provider>``, kind CONSUMER, child of the row's
  traceparent, linked to the span the receiver was in (its HTTP request's, when that is traced).

An outcome other than sent sets the span's status to ERROR with the outcome's error as its description.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from .. import __version__
from ..delivery import BatchOutcome, Delivery, Outcome, OutcomeKind

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Link, Span, Tracer

__all__ = ["SEMCONV", "AttemptSpan", "Tracing", "configured"]

SEMCONV = "1.44.0"  # the semantic conventions' version the attributes follow (messaging: "Development")
_SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV}"
MAX_DESCRIPTION = 500  # characters of an outcome's error kept as a span's status description


def configured(systems: Mapping[str, str] | None = None) -> Tracing | None:
    """The process's tracing, or None (tracing off, nothing imported). ``systems``: each transport's
    ``messaging.system`` (its kind: smtp, resend ...), by name."""
    if "opentelemetry.trace" not in sys.modules:
        return None
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None  # imported, but no provider set: spans would go nowhere
    return Tracing(provider.get_tracer("outbox_mailer", __version__, schema_url=_SCHEMA_URL), systems or {})


class AttemptSpan:
    """One send's span (an attempt's, or a batch request's), ended once with what became of it."""

    __slots__ = ("span",)

    def __init__(self, span: Span) -> None:
        self.span = span

    def finish(self, outcome: Outcome, message_id: str | None = None) -> None:
        """End with an attempt's outcome; ``message_id``: the Message-ID sent, when one was composed."""
        span = self.span
        if message_id is not None:
            span.set_attribute("messaging.message.id", message_id)
        span.set_attribute("outbox_mailer.outcome", outcome.kind.value)
        span.set_attribute("outbox_mailer.cause", outcome.cause.value)
        if outcome.reply_code is not None:
            span.set_attribute("outbox_mailer.reply_code", outcome.reply_code)
        if outcome.provider_message_id is not None:
            span.set_attribute("outbox_mailer.provider_message_id", outcome.provider_message_id)
        if outcome.kind is not OutcomeKind.SENT:
            self._failed(outcome.kind.value, outcome.error or outcome.cause.value)
        span.end()

    def finish_batch(self, results: Sequence[BatchOutcome]) -> None:
        """End a batch request's span with how many of its members each outcome got."""
        counts: dict[str, int] = {}
        for result in results:
            key = result.kind.value if isinstance(result, Outcome) else "sent_singly"
            counts[key] = counts.get(key, 0) + 1
        for key, count in counts.items():
            self.span.set_attribute(f"outbox_mailer.outcomes.{key}", count)
        if counts and OutcomeKind.SENT.value not in counts:
            self._failed("batch", ", ".join(f"{count} {key}" for key, count in sorted(counts.items())))
        self.span.end()

    def abandon(self, reason: str) -> None:
        """End a send cut off before its outcome was known (shutdown's grace period ran out)."""
        self._failed("abandoned", reason)
        self.span.end()

    def _failed(self, kind: str, description: str) -> None:
        from opentelemetry.trace import Status, StatusCode

        self.span.set_attribute("error.type", kind)
        self.span.set_status(Status(StatusCode.ERROR, description[:MAX_DESCRIPTION]))


class Tracing:
    """Spans through the tracer provider of the process (:func:`configured` makes one)."""

    def __init__(self, tracer: Tracer, systems: Mapping[str, str]) -> None:
        self.tracer = tracer
        self.systems = dict(systems)

    def attempt(self, delivery: Delivery, transport: str) -> AttemptSpan:
        """The span of one attempt at ``delivery`` through ``transport``, started now."""
        from opentelemetry.trace import SpanKind

        return AttemptSpan(self.tracer.start_span(
            f"send {transport}", context=_context(delivery.traceparent), kind=SpanKind.PRODUCER,
            attributes={**self._send(transport), "outbox_mailer.dedupe_key": delivery.dedupe_key,
                        "outbox_mailer.attempt": delivery.attempts}))

    def batch(self, members: Sequence[Delivery], transport: str) -> AttemptSpan:
        """The span of one batch request carrying ``members`` through ``transport``, started now."""
        from opentelemetry.trace import SpanKind

        return AttemptSpan(self.tracer.start_span(
            f"send {transport}", kind=SpanKind.CLIENT, links=_links([m.traceparent for m in members]),
            attributes={**self._send(transport), "messaging.batch.message_count": len(members)}))

    def event(self, traceparent: str | None, *, provider: str, kind: str, dedupe_key: str,
              message_id: str | None, bounce_class: str | None) -> None:
        """A delivery event recorded for the row enqueued under ``traceparent``: one span, ended at once."""
        from opentelemetry import trace

        ambient = trace.get_current_span().get_span_context()
        span = self.tracer.start_span(
            f"process {provider}", context=_context(traceparent), kind=trace.SpanKind.CONSUMER,
            links=[trace.Link(ambient)] if ambient.is_valid else [],
            attributes={"messaging.system": provider, "messaging.operation.type": "process",
                        "messaging.operation.name": "process", "outbox_mailer.dedupe_key": dedupe_key,
                        "outbox_mailer.event": kind,
                        **({"messaging.message.id": message_id} if message_id else {}),
                        **({"outbox_mailer.bounce_class": bounce_class} if bounce_class else {})})
        span.end()

    def _send(self, transport: str) -> dict[str, str]:
        return {"messaging.system": self.systems.get(transport, transport), "messaging.operation.type": "send",
                "messaging.operation.name": "send", "messaging.destination.name": transport}


def _context(traceparent: str | None) -> Context:
    """The remote parent a traceparent names; an empty context (a new trace, whatever span is current) for
    none or a malformed one."""
    from opentelemetry.context import Context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    if traceparent is None:
        return Context()
    return TraceContextTextMapPropagator().extract({"traceparent": traceparent}, Context())


def _links(traceparents: Sequence[str | None]) -> list[Link]:
    from opentelemetry import trace

    links = []
    for traceparent in traceparents:
        context = trace.get_current_span(_context(traceparent)).get_span_context()
        if context.is_valid:
            links.append(trace.Link(context))
    return links
