from outbox_mailer.daemon.breaker import Breaker


def test_pauses_grow_exponentially_up_to_the_cap() -> None:
    b = Breaker(base_seconds=1, max_seconds=5)
    assert [b.unreachable(100.0) for _ in range(5)] == [1, 2, 4, 5, 5]


def test_paused_until_the_deadline_then_open() -> None:
    b = Breaker(base_seconds=2, max_seconds=30)
    b.unreachable(10.0)
    assert b.is_paused(11.9) and b.remaining(11.0) == 1.0
    assert not b.is_paused(12.0) and b.remaining(13.0) == 0.0


def test_reaching_the_server_closes_the_breaker() -> None:
    b = Breaker(base_seconds=1, max_seconds=30)
    b.unreachable(0.0)
    b.unreachable(0.0)
    b.reached()
    assert not b.is_paused(0.0) and b.failures == 0
    assert b.unreachable(0.0) == 1


def test_a_later_short_pause_never_shortens_a_longer_one() -> None:
    b = Breaker(base_seconds=1, max_seconds=30, failures=4)
    b.unreachable(0.0)  # 16 s
    b.failures = 0
    assert b.unreachable(1.0) == 15.0
