"""The overview's bar charts as SVG geometry the template draws (no script, no chart library)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

HEIGHT = 80.0  # the bars' area, in SVG units
WIDTH = 720.0


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    width: float
    sent_height: float
    failed_height: float
    label: str  # the bucket's start and counts, for the bar's <title>


@dataclass(frozen=True, slots=True)
class Chart:
    bars: tuple[Bar, ...]
    peak: int
    sent: int
    failed: int
    height: float = HEIGHT
    width: float = WIDTH


def bar_chart(rows: Sequence[dict[str, Any]], *, bucket_seconds: int, buckets: int,
              now: float | None = None) -> Chart:
    """``buckets`` bars of ``bucket_seconds`` each, the last one holding ``now``; ``rows`` hold
    ``bucket`` (its start), ``sent`` and ``failed``."""
    now = time.time() if now is None else now
    last = int(now // bucket_seconds) * bucket_seconds
    first = last - (buckets - 1) * bucket_seconds
    counts: dict[int, tuple[int, int]] = {}
    for row in rows:
        start = int(row["bucket"].timestamp())
        if first <= start <= last:
            counts[start] = (int(row["sent"]), int(row["failed"]))
    peak = max((s + f for s, f in counts.values()), default=0)
    width = WIDTH / buckets
    bars = []
    for i in range(buckets):
        start = first + i * bucket_seconds
        sent, failed = counts.get(start, (0, 0))
        scale = HEIGHT / peak if peak else 0.0
        when = datetime.fromtimestamp(start, UTC).strftime("%Y-%m-%d %H:%M")
        bars.append(Bar(round(i * width, 2), round(width * 0.8, 2), round(sent * scale, 2), round(failed * scale, 2),
                        f"{when} UTC: {sent} sent, {failed} failed"))
    return Chart(tuple(bars), peak, sum(s for s, _ in counts.values()), sum(f for _, f in counts.values()))
