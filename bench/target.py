"""One target of the benchmark and the verdict a run gives it.

Every part that has targets (the grid, the enqueue figures, the scheduler, the stale
statistics backlog) makes them of this record, and ``bench.report`` writes them all in one
table; so it lives below all of them, and none of them imports the report to make one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Target:
    """One target, and what this run measured for it."""

    name: str
    goal: str
    measured: str
    met: bool | None  # None: this run did not measure it
    bottleneck: str = ""
