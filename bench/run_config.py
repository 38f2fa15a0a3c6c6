"""The benchmark run's configuration (from the command line) and its results, shared by its parts."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field


@dataclass
class Config:
    quick: bool
    reps: int
    log_level: str
    core_rows: int
    core_concurrency: int
    core_batch: int
    memory_rows: int
    pgq_batches: list[int]
    seconds: float
    pool_one: int
    pool_two: int
    latency_seconds: float
    latency_rate: float
    final_rows: int
    api_seconds: float
    api_concurrency: int
    profile_dir: str | None
    statements: bool = False  # realistic windows count their statements (pg_stat_statements on)

    @classmethod
    def from_args(cls, a: argparse.Namespace) -> Config:
        q = a.quick
        return cls(
            quick=q, reps=a.reps or (1 if q else 3), log_level=a.log_level,
            core_rows=a.core_rows or (5_000 if q else 30_000), core_concurrency=a.concurrency, core_batch=a.batch,
            memory_rows=10_000 if q else 100_000,
            pgq_batches=[100, 500] if q else [100, 250, 500, 1000],
            seconds=a.seconds or (1.5 if q else 6.0), pool_one=a.pool, pool_two=a.pool_two,
            latency_seconds=3.0 if q else 10.0, latency_rate=100.0,
            final_rows=50_000 if q else 1_000_000,
            api_seconds=a.api_seconds or (6.0 if q else 20.0), api_concurrency=a.api_concurrency,
            profile_dir=a.profile, statements=a.statements,
        )


@dataclass
class Results:
    figures: dict[str, object] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def put(self, key: str, value: object) -> None:
        self.figures[key] = value
