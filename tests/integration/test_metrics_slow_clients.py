"""The metrics endpoint under hostile clients: slow senders (slowloris), clients that vanish mid-request.

Real sockets on loopback against a real daemon: in-process for the endpoint itself, and as a
subprocess for what SIGTERM and stderr look like to systemd. Every wait is bounded.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from anyio.abc import TaskStatus

from outbox_mailer.daemon.metrics import Metrics
from outbox_mailer.daemon.service import Daemon
from outbox_mailer.serving.http_server import MAX_CONNECTIONS, REQUEST_TIMEOUT_SECONDS
from outbox_mailer.transports.smtp import SmtpTransport
from tests.in_process_daemon import settings_for
from tests.smtp_server import SmtpTestServer, free_port

pytestmark = pytest.mark.anyio

SLOW_CLIENTS = 12  # more than the old server's request threads (8)
LINE_EVERY_SECONDS = 2.0  # one header line per interval: never idle long enough for a per-read timeout
HELD_SECONDS = 30.0  # how long a slow client keeps trickling unless the server cuts it off
PROBE_SECONDS = 2.0  # an orchestrator's probe timeout
STOP_BOUND_SECONDS = 5.0  # shutdown must not wait for slow clients (systemd's stop timeout is far above)


async def slow_client(host: str, port: int, path: str = "/metrics", *, every: float = LINE_EVERY_SECONDS,
                      held: float = HELD_SECONDS) -> None:
    """Start a request and send one more header line every ``every`` seconds, never finishing it."""
    try:
        async with await anyio.connect_tcp(host, port) as stream:
            await stream.send(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n".encode())
            with anyio.move_on_after(held):
                for i in range(10_000):
                    await anyio.sleep(every)
                    await stream.send(f"X-Slow-{i}: {'x' * 20}\r\n".encode())
    except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass  # cut off by the server: what it should do eventually


def vanishing_client(host: str, port: int, path: str = "/metrics") -> None:
    """Send a whole request and reset the connection at once, before the answer can be written."""
    with socket.create_connection((host, port), timeout=2) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close() sends RST
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())


async def probe(base: str, path: str) -> httpx.Response:
    with anyio.fail_after(PROBE_SECONDS):
        async with httpx.AsyncClient(timeout=PROBE_SECONDS) as client:
            return await client.get(base + path)


class Served:
    def __init__(self, daemon: Daemon, host: str, port: int) -> None:
        self.daemon, self.host, self.port = daemon, host, port
        self.base = f"http://{host}:{port}"
        self.stopped_at: float | None = None  # anyio.current_time() when metrics.serve() was left


@pytest.fixture
async def served(db_url: str, smtp_server: SmtpTestServer) -> AsyncIterator[Any]:
    """served(): a daemon with metrics on a free loopback port; records when its serve() block ends."""
    settings = settings_for(db_url, smtp_server, metrics_address=f"127.0.0.1:{free_port()}")
    transport = SmtpTransport(settings.smtp)
    metrics = Metrics(settings, stats_interval_seconds=0.2, snapshot_interval_seconds=0.05)
    daemon = Daemon(settings, {"smtp": transport}, observer=metrics)
    holder: list[Served] = []

    async def run(*, task_status: TaskStatus[tuple[str, int]]) -> None:
        async with metrics.serve(daemon) as address:
            holder.append(Served(daemon, *address))
            task_status.started(address)
            await daemon.run()
        holder[0].stopped_at = anyio.current_time()

    async with anyio.create_task_group() as tg:
        await tg.start(run)
        s = holder[0]
        with anyio.fail_after(10):  # ready: the daemon has reported and the database answers
            while (await probe(s.base, "/readyz")).status_code != 200:
                await anyio.sleep(0.05)
        try:
            yield s
        finally:
            daemon.stop()
            with anyio.fail_after(HELD_SECONDS + 10):  # bounded even if shutdown waits for the clients
                while s.stopped_at is None:
                    await anyio.sleep(0.05)
    await transport.aclose()


async def test_health_and_metrics_answer_while_slow_clients_hold_connections(served: Any) -> None:
    s = served
    async with anyio.create_task_group() as clients:
        for _ in range(SLOW_CLIENTS):
            clients.start_soon(slow_client, s.host, s.port)
        await anyio.sleep(LINE_EVERY_SECONDS + 0.5)  # every slow client connected and has trickled once
        for _ in range(2):
            health = await probe(s.base, "/healthz")
            assert (health.status_code, health.json()) == (200, {"status": "ok"})
            ready = await probe(s.base, "/readyz")
            assert ready.status_code == 200 and ready.json()["status"] == "ready"
            scrape = await probe(s.base, "/metrics")
            assert scrape.status_code == 200 and "outbox_mailer_in_flight" in scrape.text
            assert (await probe(s.base, "/nope")).status_code == 404
        clients.cancel_scope.cancel()


async def test_stopping_is_not_held_by_slow_clients(served: Any) -> None:
    s = served
    async with anyio.create_task_group() as clients:
        for _ in range(SLOW_CLIENTS):
            clients.start_soon(slow_client, s.host, s.port)
        await anyio.sleep(LINE_EVERY_SECONDS + 0.5)
        asked = anyio.current_time()
        s.daemon.stop()
        with anyio.fail_after(HELD_SECONDS + 10):
            while s.stopped_at is None:
                await anyio.sleep(0.05)
        clients.cancel_scope.cancel()
    assert s.stopped_at - asked < STOP_BOUND_SECONDS, "the metrics server waited for its slow clients"
    with pytest.raises(httpx.ConnectError):
        await probe(s.base, "/healthz")


async def test_a_slow_client_is_cut_off_after_the_request_timeout(served: Any) -> None:
    s = served
    async with await anyio.connect_tcp(s.host, s.port) as stream:
        started = anyio.current_time()

        async def trickle() -> None:
            try:
                await stream.send(b"GET /metrics HTTP/1.1\r\n")
                for i in range(10_000):
                    await anyio.sleep(0.5)  # far more often than any per-read timeout
                    await stream.send(f"X-Slow-{i}: 1\r\n".encode())
            except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass

        received = b""
        async with anyio.create_task_group() as tg:
            tg.start_soon(trickle)
            with anyio.fail_after(REQUEST_TIMEOUT_SECONDS + 5):
                try:
                    while True:
                        received += await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                    pass
            tg.cancel_scope.cancel()
    assert anyio.current_time() - started >= REQUEST_TIMEOUT_SECONDS - 0.5, "cut off before its time"
    assert received == b"" or received.startswith(b"HTTP/1.1 408 "), received[:200]
    health = await probe(s.base, "/healthz")
    assert health.status_code == 200


async def test_clients_that_vanish_mid_request_leave_no_traceback(
    served: Any, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    s = served
    for path in ("/metrics", "/healthz", "/readyz", "/nope") * 5:
        await anyio.to_thread.run_sync(vanishing_client, s.host, s.port, path)
    await anyio.sleep(0.5)  # let the server try to answer the vanished clients
    assert (await probe(s.base, "/healthz")).status_code == 200
    err = capfd.readouterr().err
    for word in ("Traceback", "BrokenPipeError", "ConnectionResetError"):
        assert word not in err, err
        assert word not in caplog.text, caplog.text


def test_sigterm_stops_the_daemon_promptly_despite_slow_clients_and_stderr_stays_clean(
    db_url: str, smtp_server: SmtpTestServer
) -> None:
    """The whole path systemd sees: `outbox-mailer run` with metrics, slow and vanishing clients, SIGTERM."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_MAILER_")}
    env |= {"OUTBOX_MAILER_DATABASE_URL": db_url, "OUTBOX_MAILER_METRICS_ADDRESS": f"127.0.0.1:{port}",
            "OUTBOX_MAILER_SMTP__HOST": smtp_server.host, "OUTBOX_MAILER_SMTP__PORT": str(smtp_server.port),
            "OUTBOX_MAILER_SMTP__TLS": "none", "OUTBOX_MAILER_DEFAULT_FROM": "app@example.com"}
    proc = subprocess.Popen([sys.executable, "-m", "outbox_mailer", "run"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        anyio.run(_slow_clients_then_sigterm, proc, port, backend="asyncio")
        _, err = proc.communicate(timeout=HELD_SECONDS + 10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    for word in ("Traceback", "BrokenPipeError", "ConnectionResetError"):
        assert word not in err, err
    assert "received SIGTERM" in err


async def _slow_clients_then_sigterm(proc: subprocess.Popen[str], port: int) -> None:
    base = f"http://127.0.0.1:{port}"
    with anyio.fail_after(30):
        while True:
            assert proc.poll() is None, "the daemon exited before becoming ready"
            try:
                if (await probe(base, "/readyz")).status_code == 200:
                    break
            except (httpx.HTTPError, TimeoutError):
                pass
            await anyio.sleep(0.1)
    async with anyio.create_task_group() as clients:
        for _ in range(SLOW_CLIENTS):
            clients.start_soon(slow_client, "127.0.0.1", port)
        await anyio.sleep(LINE_EVERY_SECONDS + 0.5)
        for path in ("/metrics", "/healthz") * 5:
            await anyio.to_thread.run_sync(vanishing_client, "127.0.0.1", port, path)
        assert (await probe(base, "/healthz")).status_code == 200
        proc.send_signal(signal.SIGTERM)
        asked = time.monotonic()
        with anyio.fail_after(HELD_SECONDS + 10):
            while proc.poll() is None:
                await anyio.sleep(0.05)
        took = time.monotonic() - asked
        clients.cancel_scope.cancel()
    assert took < STOP_BOUND_SECONDS, f"SIGTERM took {took:.1f}s: held by slow clients"


async def test_connections_are_capped_and_idle_ones_expire(served: Any) -> None:
    s = served
    idle = [await anyio.connect_tcp(s.host, s.port) for _ in range(MAX_CONNECTIONS)]
    try:
        await anyio.sleep(0.2)  # the server has accepted them all
        async with await anyio.connect_tcp(s.host, s.port) as extra:
            with anyio.fail_after(2):
                with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError, OSError)):
                    await extra.receive()  # closed on arrival: one too many
        await anyio.sleep(REQUEST_TIMEOUT_SECONDS + 1)  # none of them sent a request in time
        with anyio.fail_after(2):
            for stream in idle:
                try:
                    assert (await stream.receive()).startswith(b"HTTP/1.1 408 ")
                except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                    pass
        assert (await probe(s.base, "/healthz")).status_code == 200
    finally:
        for stream in idle:
            await stream.aclose()
