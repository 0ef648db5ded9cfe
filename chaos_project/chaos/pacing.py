"""Releasing a run's tasks by what the workers claim, so the backlog stays short.

A lapsed lease is taken by the next claim only when few tasks are ready ahead of it; with a
long backlog a stopped worker's tasks wait their turn and the zombie wakes before anyone took
them, so the fence is never tested. The pacer therefore keeps at most ``window`` tasks ready
(enqueued, visible and not yet claimed): each tick it releases as many as the workers claimed
since the last one, however fast or slow the machine is. Tasks in flight do not count: a
stopped or dead worker's leases must not starve the healthy workers of work.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Pacer:
    """How many of ``total`` tasks to release now, given how many are ready (outstanding)."""

    total: int
    window: int
    released: int = 0

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"the pacing window must be >= 1, got {self.window}")

    @property
    def finished_releasing(self) -> bool:
        return self.released >= self.total

    def due(self, outstanding: int) -> int:
        """How many to release now (never more than what remains, never below zero)."""
        return max(0, min(self.window - outstanding, self.total - self.released))

    def take(self, outstanding: int) -> range:
        """The indexes of the tasks to release now, counted as released."""
        start = self.released
        self.released += self.due(outstanding)
        return range(start, self.released)
