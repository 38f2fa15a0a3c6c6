"""What a soak runs: the daemon's settings and the seeded fault plan (pure, no I/O).

``SETTINGS`` configures the daemon under test by environment, with short timeouts so that every
fault settles within seconds; the verdict's limits (soak_verdict.py) follow its pool size, rescue
delay and growth windows. ``plan_faults`` is the seeded schedule that the soak's scheduler (soak.py)
follows.
"""

from __future__ import annotations

import random
from typing import Any

POOL_SIZE = 4
RESCUE_AFTER_SECONDS = 4.5
SETTINGS = {
    "OUTBOX_MAILER_DEFAULT_FROM": "app@example.com",
    "OUTBOX_MAILER_SMTP__TLS": "none",
    "OUTBOX_MAILER_SMTP__POOL_SIZE": str(POOL_SIZE),
    "OUTBOX_MAILER_SMTP__CONNECT_TIMEOUT_SECONDS": "1",
    "OUTBOX_MAILER_SMTP__COMMAND_TIMEOUT_SECONDS": "1",
    "OUTBOX_MAILER_SMTP__DATA_TIMEOUT_SECONDS": "2",
    "OUTBOX_MAILER_SMTP__SEND_TIMEOUT_SECONDS": "3",
    "OUTBOX_MAILER_RESCUE_AFTER_SECONDS": str(RESCUE_AFTER_SECONDS),
    "OUTBOX_MAILER_RESCUE_INTERVAL_SECONDS": "0.5",
    "OUTBOX_MAILER_RETRY__BASE_SECONDS": "0.05",
    "OUTBOX_MAILER_RETRY__MAX_SECONDS": "0.5",
    "OUTBOX_MAILER_PAUSE_MAX_SECONDS": "4",
    "OUTBOX_MAILER_MAX_ATTEMPTS": "50",
    "OUTBOX_MAILER_CONCURRENCY": "8",
    "OUTBOX_MAILER_POLL_INTERVAL_SECONDS": "0.5",
    "OUTBOX_MAILER_IN_DOUBT": "resend",
}
KINDS = ("smtp_drop", "smtp_outage", "pg_restart", "kill9")
# Growth is judged within the last daemon lifetime, after a warm-up, over at least a minimum span
# (soak_verdict.LIMITS); the last kill -9 must leave that much, plus the kill's own ~10 s (up to 3 s
# waiting for a claim in flight, up to 2 s before the restart, the start-up, the next sample).
WARMUP_SECONDS = 15.0
MIN_JUDGED_SECONDS = 40.0
LAST_LIFETIME_SECONDS = WARMUP_SECONDS + MIN_JUDGED_SECONDS + 10.0
SHORTEST_SECONDS = 75.0  # the shortest run that kills a daemon and still judges the last lifetime


def plan_faults(seed: int, seconds: float) -> list[dict[str, Any]]:
    """Seeded schedule: a fault every ~10-20 s after a 10 s quiet start, each kind at least once
    (and one immediate PostgreSQL restart), kill -9 only in the first 40 %. A run shorter than two
    minutes (at least SHORTEST_SECONDS) has its gaps scaled down to fit every kind in, and its
    kills early enough to leave LAST_LIFETIME_SECONDS; from two minutes on, the scale is 1 and
    that bound is later than 40 %, so a longer run's plan is what it always was."""
    rng = random.Random(seed)
    scale = min(1.0, seconds / 120)
    times, t = [], min(10.0, seconds * 0.1)
    while t < seconds - 8:
        times.append(t)
        t += rng.uniform(10, 20) * scale
    kill_before = min(seconds * 0.4, seconds - LAST_LIFETIME_SECONDS)
    early = [i for i, t in enumerate(times) if t < kill_before]
    kinds: list[str | None] = [None] * len(times)
    for i in rng.sample(early, min(len(early), max(1, round(len(early) * 0.3)))):
        kinds[i] = "kill9"
    free = [i for i, k in enumerate(kinds) if k is None]
    rng.shuffle(free)
    for kind in ("smtp_drop", "smtp_outage", "pg_restart", "pg_restart_immediate"):
        if free:
            kinds[free.pop()] = kind
    for i in free:
        kinds[i] = rng.choices(["smtp_drop", "smtp_outage", "pg_restart"], [0.4, 0.3, 0.3])[0]
    plan = []
    for t, kind in zip(times, kinds, strict=True):
        if kind == "smtp_drop":
            step = {"duration": rng.uniform(2, 5), "probability": rng.uniform(0.3, 0.6)}
        elif kind == "smtp_outage":
            step = {"duration": rng.uniform(2, 6), "variant": rng.choice(["refused", "reject421"])}
        elif kind == "kill9":
            step = {"restart_after": rng.uniform(0.3, 2.0)}
        else:
            mode = "immediate" if kind == "pg_restart_immediate" or rng.random() < 0.25 else "fast"
            kind, step = "pg_restart", {"mode": mode, "down": rng.uniform(0, 2)}
        plan.append({"t": round(t, 2), "kind": kind, **{k: round(v, 2) if isinstance(v, float) else v
                                                        for k, v in step.items()}})
    return plan
