"""Releasing a run's tasks by what the workers claim, so the backlog stays short.

A lapsed lease is taken by the next claim only when few tasks are ready ahead of it; with a
long backlog a stopped worker's tasks wait their turn and the zombie wakes before anyone took
them, so the fence is never tested. The pacer therefore keeps at most ``window`` tasks ready
(enqueued, visible and not yet claimed): each tick it releases as many as the workers claimed
since the last one, however fast or slow the machine is. Tasks in flight do not count: a
stopped or dead worker's leases must not starve the healthy workers of work.

With ``spread`` (the chaos's seconds), releases also keep to a schedule: by ``now`` seconds at
most ``window`` plus ``now / spread`` of the total. On a machine that finishes tasks faster
than the run lasts, the tasks would otherwise be gone halfway through and the events planned
for the second half would find no worker holding a lease to break; spread over the chaos,
tasks are in flight whenever an event is due. A slower machine is paced by the window alone.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Pacer:
    """How many of ``total`` tasks to release now, given how many are ready (outstanding)."""

    total: int
    window: int
    released: int = 0
    spread: float = 0.0
    """Seconds over which to spread the releases (0: as fast as the workers claim)."""

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"the pacing window must be >= 1, got {self.window}")

    @property
    def finished_releasing(self) -> bool:
        return self.released >= self.total

    def due(self, outstanding: int, now: float = 0.0) -> int:
        """How many to release now (never more than what remains, never below zero)."""
        limit = self.total
        if self.spread > 0 and now < self.spread:
            limit = min(limit, self.window + int(self.total * now / self.spread))
        return max(0, min(self.window - outstanding, limit - self.released))

    def take(self, outstanding: int, now: float = 0.0) -> range:
        """The indexes of the tasks to release now (``now``: seconds into the chaos)."""
        start = self.released
        self.released += self.due(outstanding, now)
        return range(start, self.released)
