"""Per-queue counts shown above the task and dead-letter changelists.

On PostgreSQL one query reads every queue, and stays cheap on a big table: the queues come from
a loose index scan, the pending and dead counts from the (queue, state) index, and the done
count, the one that grows without bound, is counted only up to ``DONE_COUNT_LIMIT``.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connections, transaction

from rivet.admin.large_tables import QUERIES, is_postgres
from rivet.models import Task
from rivet.stores import store_for_alias

#: Done tasks are counted up to this many per queue; past it the table says "10 000+".
DONE_COUNT_LIMIT = 10_000


@dataclass(frozen=True, kw_only=True)
class QueueRow:
    """One queue's line in the overview."""

    queue: str
    ready: int
    leased: int
    delayed: int
    done: int
    dead: int
    oldest_ready_age_secs: float | None

    @property
    def done_display(self) -> str:
        if self.done > DONE_COUNT_LIMIT:
            return f"{DONE_COUNT_LIMIT:,}+".replace(",", " ")
        return str(self.done)

    @property
    def oldest_ready_age(self) -> str:
        return format_age(self.oldest_ready_age_secs)


def queue_overview(alias: str) -> list[QueueRow]:
    """Counts for every queue that has a task, in queue order."""
    if is_postgres(alias):
        # The planner's cost guess for the per-queue probes crosses jit_above_cost on a big
        # table, and compiling the query would then take longer than running it.
        with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
            cursor.execute(QUERIES["jit_off"])
            cursor.execute(QUERIES["queue_overview"], {"done_cap": DONE_COUNT_LIMIT + 1})
            return [_row(*row) for row in cursor.fetchall()]
    store = store_for_alias(alias)
    queues = Task.objects.using(alias).order_by("queue").values_list("queue", flat=True)
    return [_from_stats(store.queue_stats(queue)) for queue in queues.distinct()]


def _row(queue, ready, leased, delayed, done, dead, age) -> QueueRow:
    return QueueRow(
        queue=queue,
        ready=ready,
        leased=leased,
        delayed=delayed,
        done=done,
        dead=dead,
        oldest_ready_age_secs=age,
    )


def _from_stats(stats) -> QueueRow:
    return _row(
        stats.queue,
        stats.ready,
        stats.leased,
        stats.delayed,
        stats.done,
        stats.dead,
        stats.oldest_ready_age_secs,
    )


def format_age(secs: float | None) -> str:
    """An age as an operator reads it: '-', '4.2s', '3m 5s', '2h 10m', '3d 4h'."""
    if secs is None:
        return "-"
    secs = max(secs, 0.0)
    if secs < 60:
        return f"{secs:.1f}s"
    whole = int(secs)
    for unit, size, sub, sub_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60)):
        if whole >= size:
            return f"{whole // size}{unit} {whole % size // sub_size}{sub}"
    return f"{whole // 60}m {whole % 60}s"
