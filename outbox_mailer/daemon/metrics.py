"""Prometheus metrics and health endpoints: the only module that imports prometheus_client.

:class:`Metrics` is the daemon's observer (``Daemon(observer=metrics)``): it counts
outcomes as the recorder writes them and claim batches as the claim loop takes them.
``async with metrics.serve(daemon):`` around ``daemon.run()`` binds
``settings.metrics_address`` (a clear :class:`ConfigurationError` when it cannot),
serves HTTP in the daemon's event loop (a Starlette app on uvicorn, see http_server.py for
the request timeout, connection cap and shutdown), and runs two refresh tasks:

* every second, a snapshot of the daemon (health, in flight, reconnects, pauses),
  which the endpoints and the scrape-time gauges read;
* every ``stats_interval_seconds``, the queue statistics (rows per status, due now,
  age of the oldest due row) on the metrics' own one-connection pool.

Leaving the block stops both tasks and the HTTP server (without waiting for slow
clients), and closes the pool.

Endpoints: ``GET /metrics`` (Prometheus text format, or OpenMetrics when asked),
``/healthz`` (200 while the claim loop turns), ``/readyz`` (200 while the database
answers and no transport is paused); any other path 404; GET and HEAD only (else 405).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..delivery import OutcomeKind, Status
from ..errors import ConfigurationError, DatabaseError
from ..serving.http_server import serve_http
from ..settings.config import Settings
from ..store import OutcomeWrite, Store
from .tally import Counted, tally

if TYPE_CHECKING:
    from .quotas import SharedLimit
    from .service import Daemon

log = logging.getLogger("outbox_mailer")

STATUSES = tuple(s.value for s in Status)
OTHER_TRANSPORT = "other"  # label for a row naming a transport that is not configured (bounded cardinality)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
BATCH_BUCKETS = (0, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)
SNAPSHOT_INTERVAL_SECONDS = 1.0
STATS_INTERVAL_SECONDS = 10.0
STATS_TIMEOUT_SECONDS = 10.0
PATHS = ("/metrics", "/healthz", "/readyz")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The daemon's state as of ``taken`` (time.monotonic()), read in the event loop."""

    taken: float
    health: dict[str, Any]
    reconnects: int
    pauses: dict[str, int]
    paused: dict[str, bool]
    limits: dict[str, SharedLimit]  # the transports with shared limits (read at scrape time)


class Metrics:
    """Counters and histograms fed by the daemon, gauges refreshed from it and from the database."""

    def __init__(self, settings: Settings, *, stats_interval_seconds: float = STATS_INTERVAL_SECONDS,
                 snapshot_interval_seconds: float = SNAPSHOT_INTERVAL_SECONDS) -> None:
        self.address = settings.metrics_address
        self._url = settings.require_database_url()
        self._stats_interval = stats_interval_seconds
        self._snapshot_interval = snapshot_interval_seconds
        self._stale_after = max(5.0, 5 * snapshot_interval_seconds)
        self._known = set(settings.all_transports())
        self.registry = CollectorRegistry(auto_describe=True)
        r, by_transport = self.registry, ["transport"]
        self.sent = Counter("outbox_mailer_emails_sent", "Emails the server accepted (row became sent)",
                            by_transport, registry=r)
        self.failed = Counter("outbox_mailer_emails_failed", "Rows that became failed (permanent reply, "
                              "attempts used up, expired, cannot compose)", by_transport, registry=r)
        self.retries = Counter("outbox_mailer_retries", "Attempts after which the row went back to pending "
                               "(4xx, unreachable server, ambiguous with in_doubt=resend)", by_transport, registry=r)
        self.in_doubt = Counter("outbox_mailer_emails_in_doubt", "Rows that became in_doubt", by_transport,
                                registry=r)
        self.ambiguous = Counter("outbox_mailer_ambiguous_outcomes", "Attempts whose outcome is unknown (reply "
                                 "to the message body lost, or a dead process's claim rescued)", by_transport,
                                 registry=r)
        self.claims_lost = Counter("outbox_mailer_claims_lost", "Outcomes not applied: the row's claim had "
                                   "changed (should stay 0)", registry=r)
        self.suppressed = Counter("outbox_mailer_emails_suppressed", "Rows failed unsent because every "
                                  "recipient is suppressed", by_transport, registry=r)
        self.replayed_to_suppressed = Counter(
            "outbox_mailer_batch_replay_suppressed_recipients", "Recipients a rescuer's resend of a recorded batch "
            "request still carried though they were suppressed after that request was recorded (the request "
            "must stay identical for the provider to absorb it)", by_transport, registry=r)
        self.send_duration = Histogram("outbox_mailer_send_duration_seconds", "Duration of one attempt, claim to "
                                       "outcome, by transport and attempt outcome", ["transport", "outcome"],
                                       buckets=LATENCY_BUCKETS, registry=r)
        self.claim_batch_size = Histogram("outbox_mailer_claim_batch_size", "Rows taken per claim (0: nothing "
                                          "was due)", buckets=BATCH_BUCKETS, registry=r)
        self.registry.register(_StateCollector(self))
        self._init_labels()
        self.snapshot: Snapshot | None = None
        self.stats: dict[str, Any] | None = None
        self.stats_refreshed_at: float | None = None  # unix time
        self._stats_ok = True
        self._store: Store | None = None
        self.serving = False  # True while the HTTP server is bound

    def _init_labels(self) -> None:
        """Every configured transport shows 0 from the start, so rate() works from the first scrape."""
        for name in self._known:
            for counter in (self.sent, self.failed, self.retries, self.in_doubt, self.ambiguous):
                counter.labels(name)

    def _transport(self, name: str) -> str:
        return name if name in self._known else OTHER_TRANSPORT

    # ---- DaemonObserver (called in the event loop; never raises into the daemon) ----

    def claimed(self, batch_size: int) -> None:
        try:
            self.claim_batch_size.observe(batch_size)
        except Exception:
            log.exception("metrics: cannot count a claim")

    def recorded(self, write: OutcomeWrite, applied: bool) -> None:
        try:
            self._count(write, applied)
        except Exception:
            log.exception("metrics: cannot count an outcome")

    def _count(self, write: OutcomeWrite, applied: bool) -> None:
        """From the tally of the write (tally.py), the one reading of what it counts as."""
        counts = tally(write, applied)
        transport = self._transport(write.attempt.transport)
        if counts.send_seconds is not None:
            self.send_duration.labels(transport, OutcomeKind(write.attempt.outcome).value).observe(counts.send_seconds)
        if counts.counted is Counted.CLAIM_LOST:
            self.claims_lost.inc()
            return
        if counts.ambiguous:
            self.ambiguous.labels(transport).inc()
        counter = {Counted.SENT: self.sent, Counted.FAILED: self.failed, Counted.RETRIED: self.retries,
                   Counted.IN_DOUBT: self.in_doubt}.get(counts.counted) if counts.counted is not None else None
        if counter is not None:
            counter.labels(transport).inc()
        if counts.suppressed:
            self.suppressed.labels(transport).inc()

    def batch_replayed_to_suppressed(self, transport: str, recipients: int) -> None:
        try:
            self.replayed_to_suppressed.labels(self._transport(transport)).inc(recipients)
        except Exception:
            log.exception("metrics: cannot count a replay's suppressed recipients")

    # ---- health, from the last snapshot ------------------------------------------

    def _fresh_snapshot(self) -> tuple[Snapshot | None, str | None]:
        snap = self.snapshot
        if snap is None:
            return None, "starting: the daemon has not reported yet"
        age = time.monotonic() - snap.taken
        if age > self._stale_after:
            return None, f"the event loop has not answered for {age:.0f}s"
        return snap, None

    def liveness(self) -> tuple[int, dict[str, Any]]:
        snap, problem = self._fresh_snapshot()
        if snap is not None and not snap.health.get("loop_alive"):
            problem = "the claim loop has not turned recently"
        if problem:
            return 503, {"status": "unhealthy", "reason": problem}
        return 200, {"status": "ok"}

    def readiness(self) -> tuple[int, dict[str, Any]]:
        snap, problem = self._fresh_snapshot()
        if snap is None:
            return 503, {"status": "not ready", "reason": problem}
        reasons = []
        if not snap.health.get("database"):
            reasons.append("database not answering")
        paused = list(snap.health.get("paused_transports") or [])
        if paused:
            reasons.append(f"transport paused: {', '.join(paused)}")
        body = {"database": bool(snap.health.get("database")), "paused_transports": paused,
                "in_flight": snap.health.get("in_flight", 0)}
        if reasons:
            return 503, {"status": "not ready", "reason": "; ".join(reasons), **body}
        return 200, {"status": "ready", **body}

    # ---- running -----------------------------------------------------------------

    def attach(self, daemon: Daemon) -> None:
        self._known |= set(daemon.transports)
        self._init_labels()

    @contextlib.asynccontextmanager
    async def serve(self, daemon: Daemon) -> AsyncIterator[tuple[str, int]]:
        """Serve HTTP and refresh the gauges while the block runs; yields the bound (host, port)."""
        self.attach(daemon)
        if not self.address:
            raise ConfigurationError("metrics_address is not set", setting="OUTBOX_MAILER_METRICS_ADDRESS")
        try:
            async with serve_http(self.asgi_app(), self.address, setting="OUTBOX_MAILER_METRICS_ADDRESS") as bound:
                host, port = bound
                self.serving = True
                log.info("metrics on http://%s:%d/metrics (/healthz, /readyz)",
                         f"[{host}]" if ":" in host else host, port)
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(self._snapshot_loop, daemon)
                    tasks.start_soon(self._stats_loop)
                    try:
                        yield host, port
                    finally:
                        tasks.cancel_scope.cancel()
        finally:
            self.serving = False  # the port is closed and every connection gone
            with anyio.CancelScope(shield=True):
                if self._store is not None:
                    await self._store.close()
                    self._store = None

    def asgi_app(self) -> Starlette:
        """GET/HEAD ``/metrics``, ``/healthz``, ``/readyz``; a JSON 404 naming them for any other path."""

        def metrics_page(request: Request) -> tuple[int, bytes, str]:
            encoder, content_type = choose_encoder(request.headers.get("accept", ""))
            return 200, encoder(self.registry), content_type

        def health(check: Callable[[], tuple[int, dict[str, Any]]]) -> Callable[[Request], tuple[int, bytes, str]]:
            def page(request: Request) -> tuple[int, bytes, str]:
                status, doc = check()
                return status, json.dumps(doc).encode(), JSON
            return page

        async def http_error(request: Request, exc: Exception) -> Response:
            if isinstance(exc, HTTPException) and exc.status_code != 404:
                return _response(exc.status_code, json.dumps({"error": exc.detail}).encode(), JSON, exc.headers)
            return _response(404, json.dumps({"error": "not found", "paths": list(PATHS)}).encode(), JSON)

        routes = [Route(path, _answering(page), methods=["GET"])  # HEAD comes with GET
                  for path, page in zip(PATHS, (metrics_page, health(self.liveness), health(self.readiness)),
                                        strict=True)]
        app = Starlette(routes=routes, exception_handlers={404: http_error, 405: http_error})
        app.router.redirect_slashes = False  # /metrics/ is a 404, as it always was
        return app

    async def _snapshot_loop(self, daemon: Daemon) -> None:
        while True:
            try:
                self.take_snapshot(daemon)
            except Exception:
                log.exception("metrics: cannot read the daemon's state")
            await anyio.sleep(self._snapshot_interval)

    def take_snapshot(self, daemon: Daemon) -> None:
        now = anyio.current_time()
        gates = daemon.gates
        self.snapshot = Snapshot(
            taken=time.monotonic(),
            health=daemon.health(),
            reconnects=daemon.reconnects,
            pauses={name: gate.breaker.pauses for name, gate in gates.items()},
            paused={name: gate.is_paused(now) for name, gate in gates.items()},
            limits={name: gate.limit for name, gate in gates.items() if gate.limit is not None},
        )

    async def _stats_loop(self) -> None:
        while True:
            await self.refresh_stats()
            await anyio.sleep(self._stats_interval)

    async def refresh_stats(self) -> bool:
        """Read the queue statistics on the metrics' own connection; False (and the old values kept) on failure."""
        try:
            with anyio.fail_after(STATS_TIMEOUT_SECONDS):
                if self._store is None:
                    self._store = await Store.open(self._url, max_size=1)
                stats = await self._store.stats()
        except (DatabaseError, TimeoutError) as exc:
            if self._stats_ok:
                log.warning("metrics: cannot read queue statistics: %s", exc)
            self._stats_ok = False
            return False
        if not self._stats_ok:
            log.info("metrics: queue statistics readable again")
        self.stats, self.stats_refreshed_at, self._stats_ok = stats, time.time(), True
        return True


class _StateCollector(Collector):
    """Gauges and counters read at scrape time from the last snapshot and statistics."""

    def __init__(self, metrics: Metrics) -> None:
        self._m = metrics

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        stats, snap = self._m.stats, self._m.snapshot
        if stats is not None:
            rows = GaugeMetricFamily("outbox_mailer_rows", "Rows in email_deliveries per status (whole table)",
                                     labels=["status"])
            for status in STATUSES:
                rows.add_metric([status], float(stats.get(status) or 0))
            yield rows
            yield GaugeMetricFamily("outbox_mailer_due_now", "Pending rows whose scheduled_at has passed",
                                    value=float(stats.get("due_now") or 0))
            yield GaugeMetricFamily("outbox_mailer_oldest_due_age_seconds", "How long the oldest due pending "
                                    "row has been due (0: none due)",
                                    value=float(stats.get("oldest_due_age_seconds") or 0.0))
            yield GaugeMetricFamily("outbox_mailer_stats_refreshed_timestamp_seconds", "Unix time of the last "
                                    "successful read of the row gauges", value=self._m.stats_refreshed_at or 0.0)
        if snap is not None:
            yield CounterMetricFamily("outbox_mailer_database_reconnects", "Times the daemon re-established its "
                                      "database connection", value=snap.reconnects)
            pauses = CounterMetricFamily("outbox_mailer_transport_pauses", "Times a transport went from open to "
                                         "paused (unreachable server, quota, refused credentials)",
                                         labels=["transport"])
            paused = GaugeMetricFamily("outbox_mailer_transport_paused", "1 while the transport is paused",
                                       labels=["transport"])
            for name in sorted(snap.pauses):
                pauses.add_metric([name], snap.pauses[name])
                paused.add_metric([name], 1.0 if snap.paused.get(name) else 0.0)
            yield pauses
            yield paused
            yield from _limit_metrics(snap.limits)
            yield GaugeMetricFamily("outbox_mailer_in_flight", "Rows claimed by this daemon and not yet recorded",
                                    value=float(snap.health.get("in_flight", 0)))


def _limit_metrics(limits: dict[str, SharedLimit]) -> Iterator[Metric]:
    """The shared limits as this daemon last saw them (quotas.py), per transport that has any."""
    rate = GaugeMetricFamily("outbox_mailer_transport_rate_per_second", "Requests per second the transport's "
                             "shared limit allows now (RATE_PER_SECOND, lowered while throttled)", labels=["transport"])
    throttles = CounterMetricFamily("outbox_mailer_transport_throttles", "Times a throttling reply lowered the "
                                    "transport's shared rate (by any daemon)", labels=["transport"])
    used = GaugeMetricFamily("outbox_mailer_transport_daily_used", "Recipients counted against DAILY_LIMIT in "
                             "the rolling window", labels=["transport"])
    remaining = GaugeMetricFamily("outbox_mailer_transport_daily_remaining", "Recipients DAILY_LIMIT still allows "
                                  "in the rolling window", labels=["transport"])
    grants = CounterMetricFamily("outbox_mailer_transport_limit_grants", "Grants of shared capacity this daemon "
                                 "took from PostgreSQL (each serves many sends)", labels=["transport"])
    for name in sorted(limits):
        limit = limits[name]
        if limit.rate_in_force is not None:
            rate.add_metric([name], limit.rate_in_force)
            throttles.add_metric([name], limit.throttles)
        if limit.daily_limit is not None:
            used.add_metric([name], float(limit.daily_used or 0))
            remaining.add_metric([name], float(limit.daily_remaining or 0))
        grants.add_metric([name], limit.grants)
    yield from (rate, throttles, used, remaining, grants)


JSON = "application/json"


def _answering(page: Callable[[Request], tuple[int, bytes, str]]) -> Callable[[Request], Any]:
    """An endpoint answering ``page``'s (status, body, content type); a 500 naming the error if it raises."""

    async def endpoint(request: Request) -> Response:
        try:
            status, body, content_type = page(request)
        except Exception as exc:
            log.exception("metrics: error answering %s", request.url.path)
            status, body, content_type = 500, json.dumps({"error": f"{type(exc).__name__}"}).encode(), JSON
        return _response(status, body, content_type)

    return endpoint


def _response(status: int, body: bytes, content_type: str, headers: Mapping[str, str] | None = None) -> Response:
    return Response(body, status_code=status, media_type=content_type,
                    headers={"Cache-Control": "no-store", **(headers or {})})
