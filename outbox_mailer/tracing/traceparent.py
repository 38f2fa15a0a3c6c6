"""An email's W3C traceparent (Trace Context level 1, version ``00``): its form, and the current span's.

``00-<32 hex trace-id>-<16 hex parent-id>-<2 hex trace-flags>``, lower case, trace-id and parent-id not all
zeros: the rule the table's INSERT applies (``email_deliveries_check_traceparent``, sql/0025_traceparent.sql),
here for :class:`outbox_mailer.client.Email`, so that an Email that exists passes it.

:func:`current_traceparent` reads the application's current OpenTelemetry span only when the application has
imported OpenTelemetry itself (``sys.modules``): nothing here imports it.
"""

from __future__ import annotations

import re
import sys

__all__ = ["current_traceparent", "traceparent_problem"]

_FORM = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
_ZERO_TRACE_ID, _ZERO_PARENT_ID = "0" * 32, "0" * 16


def traceparent_problem(value: str) -> str | None:
    """Why the table would refuse ``value`` as a traceparent (its DETAIL's words), or None."""
    if not _FORM.fullmatch(value):
        return (f"traceparent {value[:60]!r}: W3C Trace Context, 00-<32 hex trace-id>-<16 hex parent-id>-<2 hex "
                "flags>, lower case")
    if value[3:35] == _ZERO_TRACE_ID:
        return f"traceparent {value!r}: an all-zero trace-id is invalid"
    if value[36:52] == _ZERO_PARENT_ID:
        return f"traceparent {value!r}: an all-zero parent-id is invalid"
    return None


def current_traceparent() -> str | None:
    """The traceparent of the application's current span; None when it has none (or has not imported
    OpenTelemetry: then nothing is imported here)."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
