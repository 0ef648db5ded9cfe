"""Retry backoff: full jitter over [0, min(cap, backoff * 2**attempts)]."""

from __future__ import annotations

import random

import pytest

from rivet.retry import RetryPolicy


class RecordingUniform:
    """A uniform(low, high) that records its bounds and returns a chosen point in the range."""

    def __init__(self, fraction: float) -> None:
        self.fraction = fraction
        self.calls: list[tuple[float, float]] = []

    def __call__(self, low: float, high: float) -> float:
        self.calls.append((low, high))
        return low + (high - low) * self.fraction


@pytest.mark.parametrize(
    ("attempts", "ceiling"), [(0, 2.0), (1, 4.0), (2, 8.0), (3, 16.0), (5, 60.0), (40, 60.0)]
)
def test_uniform_receives_zero_and_the_ceiling(attempts: int, ceiling: float) -> None:
    uniform = RecordingUniform(fraction=1.0)
    policy = RetryPolicy(backoff_secs=2.0, cap_secs=60.0, uniform=uniform)
    assert policy.delay(attempts) == ceiling
    assert uniform.calls == [(0.0, ceiling)]


def test_full_jitter_spans_zero_to_the_ceiling() -> None:
    low = RetryPolicy(backoff_secs=1.0, cap_secs=300.0, uniform=RecordingUniform(0.0))
    assert low.delay(4) == 0.0
    high = RetryPolicy(backoff_secs=1.0, cap_secs=300.0, uniform=RecordingUniform(1.0))
    assert high.delay(4) == 16.0


def test_real_random_stays_in_range() -> None:
    rng = random.Random(7)
    policy = RetryPolicy(backoff_secs=0.5, cap_secs=10.0, uniform=rng.uniform)
    for attempts in range(12):
        ceiling = min(10.0, 0.5 * 2**attempts)
        waits = [policy.delay(attempts) for _ in range(50)]
        assert all(0.0 <= wait <= ceiling for wait in waits), (attempts, max(waits))


def test_cap_applies_and_huge_attempt_counts_do_not_overflow() -> None:
    policy = RetryPolicy(backoff_secs=1.0, cap_secs=300.0)
    assert policy.ceiling(8) == 256.0
    assert policy.ceiling(9) == 300.0
    assert policy.ceiling(10_000) == 300.0


def test_zero_backoff_means_retry_at_once() -> None:
    uniform = RecordingUniform(fraction=0.5)
    assert RetryPolicy(backoff_secs=0.0, cap_secs=300.0, uniform=uniform).delay(3) == 0.0
    assert uniform.calls == [(0.0, 0.0)]


@pytest.mark.parametrize(("backoff", "cap"), [(-1.0, 300.0), (1.0, -0.5), (-2.0, -2.0)])
def test_negative_config_is_refused(backoff: float, cap: float) -> None:
    with pytest.raises(ValueError, match=r"must be >= 0 seconds"):
        RetryPolicy(backoff_secs=backoff, cap_secs=cap)
