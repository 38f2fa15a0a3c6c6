"""The sign-in throttle over real HTTP, behind a proxy that names the client in X-Forwarded-For: failures
are counted per real client address (refused from there) and per user name (only slowed), so nobody
locks another client out; simultaneous attempts are counted before their passwords are checked."""

from __future__ import annotations

import anyio
import pytest

from outbox_mailer.console.throttle import REFUSE_AFTER
from tests.console_harness import Served, served_console

pytestmark = pytest.mark.anyio
BEHIND_PROXY = {"forwarded_for_proxies": "127.0.0.1"}


def from_client(served: Served, address: str):  # type: ignore[no-untyped-def]
    return served.client(**{"X-Forwarded-For": address})


async def test_failures_from_other_addresses_do_not_lock_the_owner_out(db_url: str) -> None:
    async with served_console(db_url, console=BEHIND_PROXY) as served:
        for i in range(REFUSE_AFTER):
            assert (await from_client(served, f"203.0.113.{i + 1}").login("olga", "wrong password!")).status_code == 401
        assert (await from_client(served, "198.51.100.7").login("olga")).status_code == 303


async def test_behind_a_proxy_one_client_refused_does_not_refuse_the_others(db_url: str) -> None:
    async with served_console(db_url, console=BEHIND_PROXY) as served:
        attacker = from_client(served, "203.0.113.9")
        for i in range(REFUSE_AFTER):
            assert (await attacker.login(f"invented-{i}", "wrong password!")).status_code == 401
        assert (await attacker.login("victor")).status_code == 429
        assert (await from_client(served, "198.51.100.7").login("victor")).status_code == 303
        # the proxy's own address is not a client: a chain is read from the right, up to the first other
        assert (await from_client(served, "203.0.113.9, 127.0.0.1").login("victor")).status_code == 429


async def test_x_forwarded_for_from_a_peer_not_trusted_is_ignored(db_url: str) -> None:
    async with served_console(db_url) as served:
        for i in range(REFUSE_AFTER):
            assert (await from_client(served, f"203.0.113.{i + 1}").login("x", "wrong password!")).status_code == 401
        assert (await from_client(served, "198.51.100.7").login("victor")).status_code == 429  # all one client


async def test_simultaneous_wrong_passwords_are_all_counted(db_url: str) -> None:
    roomy = {"sign_in_queue": 100, "sign_in_per_client": 100}
    async with served_console(db_url, console=roomy) as served:
        clients = [served.client() for _ in range(2 * REFUSE_AFTER)]
        for client in clients:
            await client.get("/login")
        answers: list[int] = []

        async def attempt(client) -> None:  # type: ignore[no-untyped-def]
            answers.append((await client.post("/login", {"username": "olga", "password": "wrong password!"}))
                           .status_code)

        async with anyio.create_task_group() as tasks:
            for client in clients:
                tasks.start_soon(attempt, client)
        assert answers.count(401) == REFUSE_AFTER and answers.count(429) == REFUSE_AFTER
