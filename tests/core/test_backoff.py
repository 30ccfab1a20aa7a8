"""The one backoff: growth, cap, jitter and reset, with each caller's numbers."""

from __future__ import annotations

import pytest

from core.backoff import Backoff


@pytest.mark.parametrize(
    ("rule", "waits"),
    [
        (Backoff(1.0, 60.0), [0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]),  # crash restarts
        (Backoff(0.5, 30.0), [0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0]),  # the API's queue rows
        (Backoff(0.2, 2.0), [0.0, 0.2, 0.4, 0.8, 1.6, 2.0]),  # Kubernetes call retries
        (Backoff(1.0, 10.0, factor=3.0), [0.0, 1.0, 3.0, 9.0, 10.0]),
    ],
    ids=["restarts", "queue", "retries", "factor-3"],
)
def test_waits_grow_to_the_cap(rule: Backoff, waits: list[float]) -> None:
    assert [rule.delay(n) for n in range(len(waits))] == pytest.approx(waits)


def test_a_long_streak_stays_at_the_cap() -> None:
    assert Backoff(0.5, 30.0).delay(10_000) == 30.0


def test_next_counts_and_reset_starts_again() -> None:
    rule = Backoff(1.0, 4.0)
    assert [rule.next() for _ in range(4)] == [1.0, 2.0, 4.0, 4.0]
    assert rule.failures == 4
    rule.reset()
    assert rule.next() == 1.0


def test_jitter_draws_below_the_nominal_wait() -> None:
    rule = Backoff(1.0, 60.0, jitter=0.5)
    waits = [rule.delay(3) for _ in range(200)]
    assert all(2.0 <= w <= 4.0 for w in waits)
    assert len(set(waits)) > 1
