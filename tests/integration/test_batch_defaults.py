"""A batching transport at default settings: ``CONCURRENCY`` counts requests, so its batches fill.

Through a Resend-like server limited to 2 requests/s, a daemon left at its default concurrency sends
batches of a hundred, not of eight (the batch sizes the server received); beside an SMTP transport,
every lane's rows held stay within the documented bound (``2 x CONCURRENCY`` requests' worth, one row
a request on a lane that sends singly), counted at every claim, and the SMTP lane's claims take no
Resend rows that would go out in small batches. The rows of a batching lane that go singly (here:
with attachments) are sent side by side, and every request of the lane, a batch call or a single
send, takes a slot of the lane's one request budget (counted as the transport is called). The
content held stays within ``(2 x CONCURRENCY + 1) x MAX_MESSAGE_BYTES`` however many rows a batch
carries: a claim loads only what is left of it (plus one row), counted at every claim.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any, TypeVar

import anyio
import pytest

from outbox_mailer.daemon.service import Daemon
from outbox_mailer.delivery import BatchOutcome, ComposedMessage, Delivery, Outcome, Transport
from outbox_mailer.settings.config import Settings
from outbox_mailer.settings.transports import ApiTransportSettings
from outbox_mailer.store import ClaimSession, OutcomeWrite
from outbox_mailer.transports.api.http import HttpApiTransport
from outbox_mailer.transports.smtp import SmtpTransport
from tests.in_process_daemon import settings_for
from tests.integration.test_daemon_batches import insert, settled
from tests.provider_server import ProviderServer
from tests.smtp_server import SmtpTestServer
from tests.sql_store import SqlStore

pytestmark = pytest.mark.anyio
DEFAULT_CONCURRENCY = Settings.model_fields["concurrency"].default
ATTACHMENT = """'[{"filename": "a.txt", "content_type": "text/plain", "content_base64": "eA=="}]'::jsonb"""
T = TypeVar("T")


class HeldAtClaims:
    """The daemon's observer: after every claim, the rows it holds on each lane."""

    def __init__(self) -> None:
        self.daemon: Daemon | None = None
        self.samples: list[dict[str, int]] = []
        self.content: list[int] = []  # the content bytes held after each claim
        self.claims: list[int] = []  # the rows each claim took

    def claimed(self, batch_size: int) -> None:
        assert self.daemon is not None
        self.samples.append({name: self.daemon.inflight.held_on(name) for name in self.daemon.lanes})
        self.content.append(self.daemon.inflight.content_held)
        self.claims.append(batch_size)

    def recorded(self, write: OutcomeWrite, applied: bool) -> None:
        pass

    def batch_replayed_to_suppressed(self, transport: str, recipients: int) -> None:
        pass


@contextlib.asynccontextmanager
async def daemon_with(settings: Settings, transports: dict[str, Transport],
                      observer: HeldAtClaims | None = None) -> AsyncIterator[Daemon]:
    daemon = Daemon(settings, transports, default_transport=settings.default_transport, observer=observer)
    if observer is not None:
        observer.daemon = daemon
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            try:
                yield daemon
            finally:
                daemon.stop()
    finally:
        for transport in transports.values():
            await transport.aclose()  # type: ignore[attr-defined]  # both kinds used here have aclose


class CountedResend(HttpApiTransport):
    """The real Resend transport, counting the requests the daemon has in it at once: all of them, and
    the single sends alone."""

    def __init__(self, settings: ApiTransportSettings, name: str) -> None:
        super().__init__(settings, name=name)
        self.requests = self.most_requests = self.singles = self.most_singles = 0

    async def send(self, message: ComposedMessage, delivery: Delivery) -> Outcome:
        self.singles += 1
        self.most_singles = max(self.most_singles, self.singles)
        try:
            return await self._counted(super().send(message, delivery))
        finally:
            self.singles -= 1

    async def send_batch(self, messages: Sequence[ComposedMessage], deliveries: Sequence[Delivery],
                         key: str) -> list[BatchOutcome]:
        return await self._counted(super().send_batch(messages, deliveries, key))

    async def _counted(self, request: Awaitable[T]) -> T:
        self.requests += 1
        self.most_requests = max(self.most_requests, self.requests)
        try:
            return await request
        finally:
            self.requests -= 1


def resend_options(server: ProviderServer, **options: Any) -> dict[str, Any]:
    """A Resend transport at its defaults (batch on, 4 requests in flight), aimed at ``server``."""
    return {"kind": "resend", "api_key": "test", "base_url": server.base_url, "timeout_seconds": 2, **options}


def batch_sizes(server: ProviderServer) -> list[int]:
    return [len(r.json()) for r in server.sends("/emails/batch") if r.status == 200]


async def test_at_default_concurrency_two_requests_a_second_carry_full_batches(
        db_url: str, store: SqlStore, smtp_server: SmtpTestServer) -> None:
    server = ProviderServer(rate_per_second=2, burst=2).start()
    try:
        options = resend_options(server, rate_per_second=2, burst=2)
        settings = settings_for(db_url, smtp_server, transports={"resend": options}, default_transport="resend")
        assert settings.concurrency == DEFAULT_CONCURRENCY
        keys = await insert(store, 300)
        async with daemon_with(settings, {"resend": HttpApiTransport(ApiTransportSettings(**options), name="resend"),
                                          "smtp": SmtpTransport(settings.smtp)}):
            assert set((await settled(store, 300, timeout=60)).values()) == {"sent"}
        sizes, singles = batch_sizes(server), len(server.sends("/emails"))
        assert sizes[:2] == [100, 100], f"the first requests carry full batches, not {DEFAULT_CONCURRENCY} rows"
        # the tail may come as a claim of one row, which goes singly (a batch of one is a single send)
        assert sum(sizes) + singles == 300 and len(sizes) + singles <= 5, (sizes, singles)
        assert dict(server.accepted_by_header) == dict.fromkeys(keys, 1)
    finally:
        server.stop()


def requests_worth(held: dict[str, int], per_request: dict[str, int]) -> int:
    return sum(math.ceil(rows / per_request[lane]) for lane, rows in held.items())


async def test_rows_held_beside_a_batching_lane_stay_within_twice_concurrency_requests(
        db_url: str, store: SqlStore, smtp_server: SmtpTestServer) -> None:
    server = ProviderServer().start()
    observer = HeldAtClaims()
    try:
        options = resend_options(server, rate_per_second=1000, burst=100)
        settings = settings_for(db_url, smtp_server, transports={"resend": options}, default_transport="resend")
        await insert(store, 600, prefix="api")
        await insert(store, 200, prefix="smtp", transport="'smtp'")
        async with daemon_with(settings, {"resend": HttpApiTransport(ApiTransportSettings(**options), name="resend"),
                                          "smtp": SmtpTransport(settings.smtp)}, observer) as daemon:
            assert set((await settled(store, 800, timeout=60)).values()) == {"sent"}
            per_request = {name: lane.batch_limit for name, lane in daemon.lanes.items()}
        samples: Sequence[dict[str, int]] = observer.samples
        assert max(requests_worth(s, per_request) for s in samples) <= 2 * DEFAULT_CONCURRENCY
        assert max(s["smtp"] for s in samples) <= 2 * DEFAULT_CONCURRENCY, "a row a request on the SMTP lane"
        assert max(s["resend"] for s in samples) > 2 * DEFAULT_CONCURRENCY, "the Resend lane held batches"
        assert len(smtp_server.messages) == 200
        assert batch_sizes(server) == [100] * 6, "a claim per request slot: no request spent on a few rows"
    finally:
        server.stop()


async def test_a_batching_lanes_single_sends_overlap_within_its_one_request_budget(
        db_url: str, store: SqlStore, smtp_server: SmtpTestServer) -> None:
    server = ProviderServer().start()
    server.add_fault("slow", delay=0.05)  # every request lasts a while: requests side by side overlap
    try:
        options = resend_options(server, rate_per_second=1000, burst=100)
        settings = settings_for(db_url, smtp_server, transports={"resend": options}, default_transport="resend")
        singly = await insert(store, 40, prefix="att", attachments=ATTACHMENT)  # claimed first, in one batch's rows
        await insert(store, 800, prefix="plain")
        resend = CountedResend(ApiTransportSettings(**options), name="resend")
        async with daemon_with(settings, {"resend": resend, "smtp": SmtpTransport(settings.smtp)}):
            assert set((await settled(store, 840, timeout=60)).values()) == {"sent"}
        budget = resend.max_parallel
        assert resend.most_requests <= budget, "batch calls and single sends share the lane's request budget"
        assert resend.most_singles > 1, "the rows that go singly are not sent one after another"
        assert sorted(r.json()["to"][0] for r in server.sends("/emails")) == sorted(f"{k}@example.com" for k in singly)
        assert sum(batch_sizes(server)) == 800
    finally:
        server.stop()


async def test_a_claim_loads_rows_while_the_content_before_each_is_within_its_byte_budget(
        db_url: str, store: SqlStore) -> None:
    await insert(store, 10, prefix="big", html_body="repeat('x', 100000)")
    session = await ClaimSession.open(db_url)
    try:
        first = await session.claim_due(10, "w", max_claim_bytes=250_000)
        rest = await session.claim_due(10, "w")
    finally:
        await session.close()
    assert [d.dedupe_key for d in first] == ["big1", "big2", "big3"], "200 KB loaded before the third: under 250 KB"
    assert all(d.content_bytes > 100_000 for d in first)
    assert len(rest) == 7, "the rows left out stay pending for the next claim"


async def test_a_claims_byte_budget_goes_to_urgent_rows_first_as_the_claim_picks_them(
        db_url: str, store: SqlStore) -> None:
    await insert(store, 5, prefix="old", html_body="repeat('x', 100000)")  # older, normal priority
    await insert(store, 2, prefix="urgent", html_body="repeat('x', 100000)", priority="10")
    session = await ClaimSession.open(db_url)
    try:
        first = await session.claim_due(10, "w", max_claim_bytes=150_000)
    finally:
        await session.close()
    assert [d.dedupe_key for d in first] == ["urgent1", "urgent2"], "the budget spent in the claim's own order"


async def test_rows_held_for_a_batching_lane_stay_within_the_content_bound(
        db_url: str, store: SqlStore, smtp_server: SmtpTestServer) -> None:
    server = ProviderServer().start()
    observer = HeldAtClaims()
    limit = 200_000
    try:
        options = resend_options(server, rate_per_second=1000, burst=100)
        settings = settings_for(db_url, smtp_server, transports={"resend": options}, default_transport="resend",
                                max_message_bytes=limit)
        await insert(store, 100, prefix="big", html_body="repeat('x', 100000)")
        async with daemon_with(settings, {"resend": HttpApiTransport(ApiTransportSettings(**options), name="resend"),
                                          "smtp": SmtpTransport(settings.smtp)}, observer):
            assert set((await settled(store, 100, timeout=60)).values()) == {"sent"}
        bound = (2 * DEFAULT_CONCURRENCY + 1) * limit
        assert max(observer.content) <= bound, "the content held stays within (2 x CONCURRENCY + 1) rows' limit"
        assert max(observer.claims) < 100, "a claim of large rows takes fewer rows"
        assert sum(batch_sizes(server)) == 100
    finally:
        server.stop()
