"""Retry policy: exponential backoff with full jitter."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """wait = uniform random in [0, min(cap, backoff * 2**attempts)].

    Full jitter spreads tasks that failed together, so they do not come back together.
    ``uniform`` is the random source (``random.uniform`` by default), injectable for tests.
    """

    backoff_secs: float = 1.0
    cap_secs: float = 300.0
    uniform: Callable[[float, float], float] = field(default=random.uniform, compare=False)

    def __post_init__(self) -> None:
        if self.backoff_secs < 0 or self.cap_secs < 0:
            raise ValueError(
                f"backoff ({self.backoff_secs}) and cap ({self.cap_secs}) must be >= 0 seconds"
            )

    def ceiling(self, attempts: int) -> float:
        """The largest wait after ``attempts`` attempts."""
        # Cap the exponent so a large attempt count cannot overflow a float.
        return min(self.cap_secs, self.backoff_secs * 2 ** min(attempts, 62))

    def delay(self, attempts: int) -> float:
        """A wait, in seconds, before the next attempt after ``attempts`` attempts."""
        return self.uniform(0.0, self.ceiling(attempts))
