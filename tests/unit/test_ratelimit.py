import pytest

from outbox_mailer.ratelimit import TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def take(bucket: TokenBucket, clock: Clock) -> float:
    """Take a token the way acquire() does, advancing the fake clock instead of sleeping; returns the wait."""
    waited = 0.0
    while (w := bucket.wait_seconds(clock())) > 0:
        clock.now += w
        waited += w
    bucket._tokens = max(0.0, bucket._tokens - 1.0)
    return waited


def test_burst_is_immediate_then_one_token_per_interval() -> None:
    clock = Clock()
    bucket = TokenBucket(2.0, burst=3, clock=clock)
    waits = [take(bucket, clock) for _ in range(6)]
    assert waits[:3] == [0.0, 0.0, 0.0]
    assert waits[3:] == pytest.approx([0.5, 0.5, 0.5])


def test_long_run_rate_is_the_configured_rate() -> None:
    clock = Clock()
    bucket = TokenBucket(10.0, burst=1, clock=clock)
    start = clock.now
    for _ in range(101):
        take(bucket, clock)
    assert clock.now - start == pytest.approx(10.0)


def test_idle_time_refills_only_up_to_burst() -> None:
    clock = Clock()
    bucket = TokenBucket(1.0, burst=2, clock=clock)
    take(bucket, clock)
    clock.now += 60
    assert [take(bucket, clock) for _ in range(3)] == pytest.approx([0.0, 0.0, 1.0])


def test_hold_off_blocks_then_restarts_empty() -> None:
    clock = Clock()
    bucket = TokenBucket(1.0, burst=5, clock=clock)
    bucket.hold_off(30)
    assert take(bucket, clock) == pytest.approx(31.0)  # 30 s blocked, then one token's worth


def test_invalid_parameters_are_refused() -> None:
    with pytest.raises(ValueError):
        TokenBucket(0)
    with pytest.raises(ValueError):
        TokenBucket(1, burst=0)
