"""sd_notify against a real AF_UNIX datagram socket bound by the test (a path and an
abstract ``@name``), and the daemon's READY / WATCHDOG / STATUS / STOPPING behaviour
in-process against the test PostgreSQL."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from outbox_mailer.daemon.service import Daemon
from outbox_mailer.delivery import ComposedMessage, Delivery, Outcome
from outbox_mailer.errors import SchemaMismatch
from outbox_mailer.serving.systemd import SystemdNotifier
from outbox_mailer.settings.config import Settings
from outbox_mailer.store import Store


class NotifySocket:
    """A datagram socket standing in for systemd's ``$NOTIFY_SOCKET``."""

    def __init__(self, address: str) -> None:
        self.address = address  # the value for NOTIFY_SOCKET
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + address[1:] if address.startswith("@") else address)
        self.sock.setblocking(False)
        self.received: list[dict[str, str]] = []  # every datagram, parsed, with its arrival time

    def drain(self) -> list[dict[str, str]]:
        """Datagrams that arrived since the last call."""
        new = []
        while True:
            try:
                data = self.sock.recv(65536)
            except BlockingIOError:
                break
            fields = dict(line.split("=", 1) for line in data.decode().splitlines())
            fields["_at"] = repr(time.monotonic())
            new.append(fields)
        self.received.extend(new)
        return new

    def wait_for(self, key: str, timeout: float = 5.0) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for fields in self.drain():
                if key in fields:
                    return fields
            time.sleep(0.005)
        raise AssertionError(f"no datagram with {key} within {timeout}s; got {self.received}")

    async def await_key(self, key: str, timeout: float = 10.0) -> dict[str, str]:
        with anyio.fail_after(timeout):
            while True:
                for fields in self.drain():
                    if key in fields:
                        return fields
                await anyio.sleep(0.005)

    def count(self, key: str, since: float = 0.0) -> int:
        self.drain()
        return sum(1 for f in self.received if key in f and float(f["_at"]) >= since)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def path_socket() -> Iterator[NotifySocket]:
    directory = tempfile.mkdtemp(prefix="om-notify-")  # short: AF_UNIX paths stop at 107 bytes
    ns = NotifySocket(os.path.join(directory, "notify"))
    yield ns
    ns.close()
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def abstract_socket() -> Iterator[NotifySocket]:
    ns = NotifySocket(f"@outbox-mailer-test-{uuid.uuid4().hex}")
    yield ns
    ns.close()


@pytest.fixture(params=["path", "abstract"])
def notify_socket(request: pytest.FixtureRequest) -> NotifySocket:
    return request.getfixturevalue(f"{request.param}_socket")


# ---- the notifier on its own --------------------------------------------------------


def test_payloads_arrive_as_systemd_expects(notify_socket: NotifySocket) -> None:
    n = SystemdNotifier({"NOTIFY_SOCKET": notify_socket.address, "WATCHDOG_USEC": "2000000"})
    assert n.enabled
    assert n.ready("sent 0, pending 3")
    assert notify_socket.wait_for("READY") == {
        "READY": "1", "STATUS": "sent 0, pending 3", "MAINPID": str(os.getpid()),
        "_at": notify_socket.received[-1]["_at"],
    }
    assert n.status("sent 5, failed 1")
    assert notify_socket.wait_for("STATUS")["STATUS"] == "sent 5, failed 1"
    assert n.watchdog()
    assert set(notify_socket.wait_for("WATCHDOG")) == {"WATCHDOG", "_at"}
    assert n.stopping("draining 2 in-flight sends")
    stop = notify_socket.wait_for("STOPPING")
    assert stop["STOPPING"] == "1" and stop["STATUS"] == "draining 2 in-flight sends"
    n.close()


def test_each_notification_is_one_datagram_of_key_value_lines(path_socket: NotifySocket) -> None:
    n = SystemdNotifier({"NOTIFY_SOCKET": path_socket.address})
    n.notify("A=1", "B=two words", "C=ü")
    raw_sock = path_socket.sock
    time.sleep(0.05)
    assert raw_sock.recv(4096) == "A=1\nB=two words\nC=ü".encode()


def test_watchdog_interval_is_half_of_watchdog_usec() -> None:
    assert SystemdNotifier({"WATCHDOG_USEC": "30000000"}).watchdog_interval_seconds == 15.0
    own = {"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": str(os.getpid())}
    assert SystemdNotifier(own).watchdog_interval_seconds == 1.5
    for bad in ("", "0", "-5", "abc", "1.5"):
        assert SystemdNotifier({"WATCHDOG_USEC": bad}).watchdog_interval_seconds is None
    assert SystemdNotifier({}).watchdog_interval_seconds is None


def test_watchdog_pid_of_another_process_disables_the_watchdog(path_socket: NotifySocket) -> None:
    other = str(os.getpid() + 1)
    n = SystemdNotifier({"NOTIFY_SOCKET": path_socket.address, "WATCHDOG_USEC": "2000000", "WATCHDOG_PID": other})
    assert n.watchdog_interval_seconds is None
    assert n.watchdog() is False
    assert n.status("still talking")  # other notifications still go out
    path_socket.wait_for("STATUS")
    assert path_socket.count("WATCHDOG") == 0


def test_without_notify_socket_every_call_is_a_quiet_no_op() -> None:
    n = SystemdNotifier({})
    assert not n.enabled
    assert n.ready("x") is False and n.status("x") is False and n.stopping("x") is False
    assert n.watchdog() is False


def test_a_vanished_socket_does_not_raise(tmp_path: Path) -> None:
    n = SystemdNotifier({"NOTIFY_SOCKET": str(tmp_path / "gone"), "WATCHDOG_USEC": "1000000"})
    assert n.enabled
    assert n.ready("x") is False
    assert n.watchdog() is False


def test_reads_the_process_environment_by_default(monkeypatch: pytest.MonkeyPatch,
                                                 abstract_socket: NotifySocket) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", abstract_socket.address)
    monkeypatch.setenv("WATCHDOG_USEC", "500000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    n = SystemdNotifier()
    assert n.watchdog_interval_seconds == 0.25
    assert n.watchdog()
    abstract_socket.wait_for("WATCHDOG")


# ---- the daemon in-process against the test PostgreSQL ---------------------------------


class AcceptAll:
    """A transport that accepts every message at once."""

    name = "smtp"
    max_parallel = 4
    send_timeout_seconds = 5.0
    idempotency_window_seconds = None

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def send(self, message: ComposedMessage, delivery: Delivery) -> Outcome:
        self.sent.append(delivery.dedupe_key)
        return Outcome.sent(f"fake-{delivery.id}")

    async def check(self) -> str:
        return "fake"

    async def aclose(self) -> None:
        pass


WATCHDOG_USEC = 200_000  # a ping every 0.1 s


def daemon_for(url: str, ns: NotifySocket, **overrides: Any) -> tuple[Daemon, AcceptAll]:
    values: dict[str, Any] = {
        "database_url": url,
        "default_from": "App <app@example.com>",
        "poll_interval_seconds": 30,  # only NOTIFY (that is, LISTEN) wakes it quickly
        "shutdown_grace_seconds": 5,
        **overrides,
    }
    transport = AcceptAll()
    notifier = SystemdNotifier({"NOTIFY_SOCKET": ns.address, "WATCHDOG_USEC": str(WATCHDOG_USEC)})
    return Daemon(Settings(**values), {"smtp": transport}, notifier=notifier), transport


async def enqueue(url: str, key: str) -> None:
    store = await Store.open(url)
    try:
        await store.enqueue({"dedupe_key": key, "to_addresses": ["to@example.com"], "subject": "hi",
                             "text_body": "body"})
    finally:
        await store.close()


@pytest.mark.anyio
async def test_unmigrated_database_exits_with_the_migrate_message_and_never_sends_ready(
    empty_db_url: str, notify_socket: NotifySocket
) -> None:
    daemon, _ = daemon_for(empty_db_url, notify_socket)
    with anyio.fail_after(20), pytest.raises(SchemaMismatch, match=r"run `outbox-mailer migrate`"):
        await daemon.run()
    await anyio.sleep(0.3)
    assert notify_socket.drain() == [], "nothing, READY least of all, may be sent before the schema is there"


@pytest.mark.anyio
async def test_ready_after_listen_then_watchdog_while_looping_then_stopping(
    db_url: str, notify_socket: NotifySocket
) -> None:
    daemon, transport = daemon_for(db_url, notify_socket)
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.run)
        ready = await notify_socket.await_key("READY", timeout=20)
        assert ready["READY"] == "1" and ready["MAINPID"] == str(os.getpid())
        assert ready["STATUS"].startswith("sent 0, failed 0,") and "in flight 0" in ready["STATUS"]
        assert notify_socket.received.index(ready) == 0, "READY is the first notification"

        # READY promised LISTEN: a new row is picked up long before the 30 s poll interval.
        await enqueue(db_url, "after-ready")
        with anyio.fail_after(5):
            while transport.sent != ["after-ready"]:
                await anyio.sleep(0.02)

        # WATCHDOG=1 keeps coming from the idle loop, at about half of WATCHDOG_USEC.
        since = time.monotonic()
        await anyio.sleep(1.0)
        pings = notify_socket.count("WATCHDOG", since)
        assert 5 <= pings <= 15, pings

        daemon.stop()
        stopping = await notify_socket.await_key("STOPPING", timeout=10)
        assert stopping["STOPPING"] == "1" and stopping["STATUS"].startswith("draining")
    assert not any("READY" in f for f in notify_socket.received[1:]), "READY is sent once"


@pytest.mark.anyio
async def test_status_line_reports_live_figures(db_url: str, notify_socket: NotifySocket,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("outbox_mailer.daemon.liveness.STATUS_EVERY_SECONDS", 0.2)
    daemon, _ = daemon_for(db_url, notify_socket, poll_interval_seconds=0.1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.run)
        await notify_socket.await_key("READY", timeout=20)
        for i in range(3):
            await enqueue(db_url, f"k{i}")
        with anyio.fail_after(10):
            while True:
                statuses = [f["STATUS"] for f in notify_socket.drain() if "STATUS" in f and "READY" not in f]
                if any(s.startswith("sent 3,") and s.endswith("pending 0") for s in statuses):
                    break
                await anyio.sleep(0.05)
        daemon.stop()


@pytest.mark.anyio
async def test_a_wedged_loop_stops_the_watchdog_pings(db_url: str, notify_socket: NotifySocket,
                                                      tmp_path: Path) -> None:
    wedge = tmp_path / "wedge"
    daemon, _ = daemon_for(db_url, notify_socket, debug_wedge_file=str(wedge))
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.run)
        await notify_socket.await_key("READY", timeout=20)
        since = time.monotonic()
        await anyio.sleep(0.6)
        assert notify_socket.count("WATCHDOG", since) >= 3, "pings while the loop runs"

        wedge.touch()
        await anyio.sleep(0.5)  # the loop notices the file at its next turn (within one interval)
        since = time.monotonic()
        await anyio.sleep(1.0)  # five watchdog intervals
        assert notify_socket.count("WATCHDOG", since) == 0, "a wedged loop must not ping"
        # Nothing else keeps the watchdog alive (no timer thread): systemd would kill it now.
        tg.cancel_scope.cancel()
