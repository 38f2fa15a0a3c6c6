"""The provider HTTP APIs' one edge: :class:`~.http.HttpApiTransport`, the only importer of httpx for sends.

What a provider module is made of (:class:`Provider`, :class:`ApiRequest`, :class:`ApiResponse`)
and the pure module of each provider (request building and answer reading, no I/O) live in
:mod:`outbox_mailer.providers`; this package face re-exports the first and stays pure (it does not
import :mod:`.http`).
"""

from __future__ import annotations

from ...providers.provider import ApiRequest, ApiResponse, Provider, ProviderOptions

__all__ = ["ApiRequest", "ApiResponse", "Provider", "ProviderOptions"]
