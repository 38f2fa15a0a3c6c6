"""Trace context (docs/tracing.md): an email's W3C ``traceparent`` and the spans that continue its trace.

* ``traceparent.py``: the form of a traceparent (the INSERT's check, in Python), and the current span's,
  taken without importing OpenTelemetry (the client and the Django backend fill the column with it);
* ``spans.py``: the daemon's span per attempt and per provider batch, the receiver's span per delivery
  event; the one importer of OpenTelemetry (the ``otel`` extra), and only in a process that has imported it
  already and set a tracer provider: otherwise tracing is off and nothing of it is imported.
"""
