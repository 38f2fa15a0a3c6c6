"""Stored templates rendered (docs/templates.md): the Jinja2 sandbox and the compile check (``sandbox.py``), one
version rendered with one row's data (``render.py``), and the worker process that renders under time and
memory limits (``worker.py``). The only importer of jinja2 besides the operator console."""
