"""Provider HTTP APIs: one pure module per provider and the one HTTP edge.

* :mod:`.provider` – what a provider module is made of (:class:`Provider`,
  :class:`ApiRequest`, :class:`ApiResponse`) and the pure helpers they share;
* :mod:`.resend`, :mod:`.postmark`, :mod:`.sendgrid`, :mod:`.webhook` (``kind=http``,
  an in-house API) – request building and answer reading, no I/O;
* :mod:`.http` – :class:`~.http.HttpApiTransport`, the only importer of httpx.

This package face stays pure (it does not import :mod:`.http`), so that the
settings can read the provider table without importing the HTTP client.
"""

from __future__ import annotations

from ...providers.provider import ApiRequest, ApiResponse, Provider, ProviderOptions

__all__ = ["ApiRequest", "ApiResponse", "Provider", "ProviderOptions"]
