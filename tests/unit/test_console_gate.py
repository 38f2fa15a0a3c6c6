"""The sign-in gate's places: a bounded number checking or waiting, a bounded share per client."""

from __future__ import annotations

import contextlib

import pytest

from outbox_mailer.console.throttle import GateFull, SignInGate

pytestmark = pytest.mark.anyio


async def test_the_gate_refuses_beyond_its_places_and_beyond_a_clients_share() -> None:
    gate = SignInGate(concurrency=1, queue=2, per_client=2)
    async with contextlib.AsyncExitStack() as held:
        await held.enter_async_context(gate.place("a"))
        await held.enter_async_context(gate.place("a"))
        with pytest.raises(GateFull):
            await held.enter_async_context(gate.place("a"))  # a's share is taken; others still get in
        await held.enter_async_context(gate.place("b"))
        with pytest.raises(GateFull):
            await held.enter_async_context(gate.place("c"))  # every place is taken
    async with gate.place("c"), gate.place("c"):  # all given back
        pass
