"""Per-queue counts shown above the task and dead-letter changelists.

They come from ``Store.queue_overview``, the read the metrics, the HTTP API and ``rivet_stats``
share, and stay cheap on a big table; past DONE_COUNT_LIMIT a queue's done count is
PostgreSQL's estimate, shown as ``~N``.
"""

from __future__ import annotations

from rivet.stores import store_for_alias
from rivet.values import QueueStats, format_age

__all__ = ["format_age", "queue_overview"]


def queue_overview(alias: str) -> list[QueueStats]:
    """Counts for every queue that has a task or a fenced write, in queue order."""
    return store_for_alias(alias).queue_overview()
