"""The installed daemon stopped while claimed rows wait for a request slot: the shared rate's, the lane's.

``outbox-mailer run`` from the built wheel sends through a Resend-like transport to the fake provider
(tests/provider_server.py) at one request every 10 s (``RATE_PER_SECOND`` 0.1, ``BURST`` 1): the first
request goes out, and the rows claimed after it wait for the next slot. SIGTERM with a short grace
period gives those rows back ``pending`` untried (attempts as before their claim, no attempt row, no
claim token left, due and errored as before), so the next daemon sends each once, on its first
attempt. kill -9 leaves them ``sending``: a daemon started later rescues them after the rescue delay
and sends each once, since nothing had been sent for them. The same holds for rows queued behind a
lane's one request slot (``MAX_PARALLEL`` 1) when the stop comes, while the request holding that slot
is left to the rescuer, which resends it under its own key.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.chaos import DaemonProcess, Fleet, insert_rows, resend_env, sql, wait_until
from tests.provider_server import KEY_HEADER, ProviderServer

ROWS = ("SELECT d.dedupe_key, d.status, d.attempts, d.claim_token IS NULL, d.last_error, d.scheduled_at, "
        "(SELECT count(*) FROM email_delivery_attempts a WHERE a.delivery_id = d.id) FROM email_deliveries d")
BATCHING = pytest.mark.parametrize("batch", [True, False], ids=["a_batch", "single_rows"])


def rows(url: str) -> dict[str, dict[str, Any]]:
    names = ("status", "attempts", "unclaimed", "last_error", "scheduled_at", "recorded")
    return {key: dict(zip(names, (status, int(attempts), unclaimed == "t", error, due, int(recorded)), strict=True))
            for key, status, attempts, unclaimed, error, due, recorded in sql(url, ROWS)}


def until(url: str, keys: list[str], status: str, daemon: DaemonProcess, timeout: float = 30) -> None:
    wait_until(lambda: all(rows(url)[k]["status"] == status for k in keys), timeout, interval=0.05,
               what=lambda: f"{keys} {status}; now {rows(url)}\n{daemon.log_tail()}")


def daemon_env(db_url: str, server: ProviderServer, batch: bool, **overrides: str) -> dict[str, str]:
    """The Resend-like transport at ``server``, batching or not; a claim may wait a minute for its slot."""
    return resend_env(db_url, server.base_url, OUTBOX_MAILER_TRANSPORTS__RESEND__BATCH=str(batch).lower(),
                      OUTBOX_MAILER_TRANSPORTS__RESEND__TIMEOUT_SECONDS="2",
                      **{"OUTBOX_MAILER_RESCUE_AFTER_SECONDS": "60", **overrides})


def slow_env(db_url: str, server: ProviderServer, batch: bool) -> dict[str, str]:
    """One request every 10 s: the request after the first waits for its slot far longer than the test
    needs to see its rows claimed and to stop the daemon."""
    return daemon_env(db_url, server, batch, OUTBOX_MAILER_TRANSPORTS__RESEND__RATE_PER_SECOND="0.1",
                      OUTBOX_MAILER_TRANSPORTS__RESEND__BURST="1", OUTBOX_MAILER_SHUTDOWN_GRACE_SECONDS="0.5")


def fast_env(db_url: str, server: ProviderServer, batch: bool, **overrides: str) -> dict[str, str]:
    """A daemon at a high rate. Its first request still waits for the slot the slow daemon's schedule had
    due next (the shared schedule in PostgreSQL, 10 s after the first request): the waits below allow it."""
    return daemon_env(db_url, server, batch, OUTBOX_MAILER_TRANSPORTS__RESEND__RATE_PER_SECOND="1000",
                      OUTBOX_MAILER_TRANSPORTS__RESEND__BURST="100", **overrides)


def one_request_out_the_rest_waiting(db_url: str, server: ProviderServer, fleet: Fleet,
                                     batch: bool) -> tuple[DaemonProcess, list[str], list[str]]:
    """A slow daemon has sent the first rows in one request and claimed the others, which wait for
    the next slot; returns it, the first rows and the waiting ones."""
    fleet.deadline(120)
    per_request = 3 if batch else 1
    first = insert_rows(db_url, per_request, prefix="first-")
    daemon = fleet.start(slow_env(db_url, server, batch), "slow")
    until(db_url, first, "sent", daemon)
    waiting = insert_rows(db_url, 3, prefix="waiting-")
    until(db_url, waiting, "sending", daemon)  # claimed, attempts charged: waiting for the next slot
    assert len(server.sends()) == 1, "the next slot came before the stop: the rows no longer wait"
    return daemon, first, waiting


def sent_once_each(server: ProviderServer, keys: list[str]) -> None:
    assert dict(server.accepted_by_header) == dict.fromkeys(keys, 1), f"each email accepted once ({KEY_HEADER})"


def drain(db_url: str, server: ProviderServer, fleet: Fleet, env: dict[str, str], name: str,
          keys: list[str]) -> None:
    """A daemon started with ``env`` sends ``keys``, each accepted once, and stops cleanly."""
    daemon = fleet.start(env, name)
    until(db_url, keys, "sent", daemon)
    daemon.terminate()
    assert daemon.wait(10) == 0, daemon.log_tail()
    sent_once_each(server, keys)


def sigterm_gives_back_untried(db_url: str, daemon: DaemonProcess, waiting: list[str],
                               others: dict[str, tuple[str, int, int]]) -> None:
    """SIGTERM ``daemon``: it exits 0; the ``waiting`` rows are back untried (attempts as before their claim,
    no attempt row, no claim token, due and errored as before) and ``others`` end (status, attempts, attempt
    rows) as given."""
    before = rows(db_url)
    daemon.terminate()
    assert daemon.wait(10) == 0, daemon.log_tail()
    after = rows(db_url)
    assert {k: (after[k]["status"], after[k]["attempts"], after[k]["recorded"]) for k in [*others, *waiting]} == {
        **others, **dict.fromkeys(waiting, ("pending", 0, 0))}, "the waiting rows are back untried"
    for key in waiting:
        assert after[key]["unclaimed"], f"{key} keeps a claim token"
        assert (after[key]["last_error"], after[key]["scheduled_at"]) == (
            before[key]["last_error"], before[key]["scheduled_at"]), "due as before: no backoff, no error"


@BATCHING
def test_sigterm_gives_rows_waiting_for_their_rate_slot_back_untried_and_the_next_daemon_sends_each_once(
        db_url: str, provider_server: ProviderServer, fleet: Fleet, batch: bool) -> None:
    daemon, first, waiting = one_request_out_the_rest_waiting(db_url, provider_server, fleet, batch)
    sigterm_gives_back_untried(db_url, daemon, waiting, dict.fromkeys(first, ("sent", 1, 1)))
    [request] = provider_server.sends()
    assert request.path == ("/emails/batch" if batch else "/emails"), "the first request only"
    sent_once_each(provider_server, first)

    drain(db_url, provider_server, fleet, fast_env(db_url, provider_server, batch), "after-sigterm", first + waiting)
    final = rows(db_url)
    assert {k: (final[k]["attempts"], final[k]["recorded"]) for k in waiting} == dict.fromkeys(waiting, (1, 1)), \
        "the waiting rows were never charged: sent on their first attempt"


@BATCHING
def test_kill9_while_rows_wait_for_their_rate_slot_a_later_daemon_rescues_them_and_sends_each_once(
        db_url: str, provider_server: ProviderServer, fleet: Fleet, batch: bool) -> None:
    daemon, first, waiting = one_request_out_the_rest_waiting(db_url, provider_server, fleet, batch)
    daemon.kill9()
    assert {rows(db_url)[k]["status"] for k in waiting} == {"sending"}, "a dead process writes nothing"

    # the rescue delay (4.5 s) is reckoned from the dead process's claim
    env = fast_env(db_url, provider_server, batch, OUTBOX_MAILER_RESCUE_AFTER_SECONDS="4.5")
    drain(db_url, provider_server, fleet, env, "rescuer", first + waiting)
    outcomes = sql(db_url, "SELECT d.dedupe_key, string_agg(a.outcome, ',' ORDER BY a.id) FROM email_deliveries d "
                           "JOIN email_delivery_attempts a ON a.delivery_id = d.id GROUP BY 1")
    assert {k: o for k, o in outcomes if k in waiting} == dict.fromkeys(waiting, "ambiguous,sent"), \
        "rescued as an unknown outcome, then sent once"


def test_sigterm_gives_rows_waiting_for_the_lanes_request_slot_back_untried_and_leaves_the_started_request_to_the_rescuer(
        db_url: str, provider_server: ProviderServer, fleet: Fleet) -> None:
    """One request slot (``MAX_PARALLEL`` 1, sending singly) held by a request the provider answers after
    the grace period: the rows claimed behind it wait for the slot; the held one may have been delivered.
    (A batching lane claims no rows for a request slot that is busy: it has none waiting for it.)"""
    fleet.deadline(120)
    provider_server.add_fault("slow", delay=3.0, count=1, paths=("/emails",))
    held = insert_rows(db_url, 1, prefix="held-")
    env = daemon_env(db_url, provider_server, False, OUTBOX_MAILER_TRANSPORTS__RESEND__RATE_PER_SECOND="1000",
                     OUTBOX_MAILER_TRANSPORTS__RESEND__MAX_PARALLEL="1", OUTBOX_MAILER_SHUTDOWN_GRACE_SECONDS="0.5")
    daemon = fleet.start(env, "one-slot")
    wait_until(provider_server.sends, 30, interval=0.05, what=lambda: f"the held request\n{daemon.log_tail()}")
    waiting = insert_rows(db_url, 3, prefix="waiting-")
    until(db_url, held + waiting, "sending", daemon)
    assert len(provider_server.sends()) == 1, "a request after the held one started: the rows no longer wait"
    # the started request is left to the rescuer
    sigterm_gives_back_untried(db_url, daemon, waiting, dict.fromkeys(held, ("sending", 1, 0)))
    wait_until(lambda: set(provider_server.accepted_by_header) == set(held), 10,
               what="the held request handled: the provider delivered its email")

    drain(db_url, provider_server, fleet, {**env, "OUTBOX_MAILER_RESCUE_AFTER_SECONDS": "4.5"}, "rescuer",
          held + waiting)
    final = rows(db_url)
    assert {k: final[k]["attempts"] for k in held + waiting} == {
        **dict.fromkeys(held, 2), **dict.fromkeys(waiting, 1)}, "only the started request's row was charged twice"
    keys = sorted(r.headers.get("idempotency-key") or "" for r in provider_server.sends())
    assert keys == sorted(held * 2 + waiting), "the held request resent under its own key, which the provider absorbed"
