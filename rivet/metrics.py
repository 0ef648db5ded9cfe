"""The queue gauges a host serves to Prometheus (``rivet/metrics/``), read at scrape time.

A worker's own counters are ``rivet.worker.metrics``. Here (``rivet/metrics/``, and
``GET rivet/queues/``): :func:`queue_overview` reads every queue's counts at scrape time. Its
cost follows the live rows, not the history:

- one grouped query over pending and dead rows, found through the two partial indexes (the
  claim index on pending rows, ``rivet_task_dead_idx`` on dead ones): done rows are not read;
- done rows: counted (one grouped query) while the table is small; above
  ``DONE_ESTIMATE_ABOVE`` rows on PostgreSQL, the planner's estimate for each queue (an
  ``EXPLAIN``, no scan; as fresh as the last ANALYZE, which autovacuum runs);
- one grouped query over the fenced writes (the ``(queue, op)`` index).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from django.db import connections
from django.db.models import Count, Min, Q
from django.db.models.functions import Now
from django.utils import timezone

from rivet.extras import require
from rivet.models import FencedWrite, Task
from rivet.values import QueueStats, TaskState

#: Above this many rows (PostgreSQL's own estimate), done tasks are estimated, not counted.
DONE_ESTIMATE_ABOVE = 200_000
# The planner's figures: no table scan. reltuples is -1 before the first ANALYZE.
TABLE_ROWS_SQL = "SELECT greatest(reltuples, 0) FROM pg_class WHERE oid = 'rivet_task'::regclass"
COMMON_QUEUES_SQL = (
    "SELECT most_common_vals::text::text[] FROM pg_stats "
    "WHERE tablename = 'rivet_task' AND attname = 'queue' AND schemaname = current_schema()"
)
DONE_ESTIMATE_SQL = (
    "EXPLAIN (FORMAT JSON) SELECT 1 FROM rivet_task WHERE queue = %s AND state = 'done'"
)


def queue_overview(using: str = "default") -> list[QueueStats]:
    """Every queue's counts now, in queue order (done may be estimated; see the module doc)."""
    tasks = Task.objects.using(using)
    now = timezone.now()
    ready = Q(state="pending", visible_at__lte=Now())
    waiting = Q(state="pending", visible_at__gt=Now())
    live = (
        # Two OR arms, not IN: each arm matches one partial index (a BitmapOr on PostgreSQL).
        tasks.filter(Q(state=TaskState.PENDING) | Q(state=TaskState.DEAD))
        .values("queue")
        .annotate(
            ready=Count("id", filter=ready),
            leased=Count("id", filter=waiting & Q(lease_owner__isnull=False)),
            delayed=Count("id", filter=waiting & Q(lease_owner__isnull=True)),
            dead=Count("id", filter=Q(state="dead")),
            oldest=Min("visible_at", filter=ready),
        )
        .order_by()
    )
    fenced = FencedWrite.objects.using(using).values("queue").annotate(n=Count("id")).order_by()
    rows = {row["queue"]: row for row in live}
    fenced_by_queue = {row["queue"]: row["n"] for row in fenced}
    done_by_queue = done_counts(using, set(rows) | set(fenced_by_queue))
    names = sorted(set(rows) | set(done_by_queue) | set(fenced_by_queue))
    return [_stats(name, rows.get(name, {}), done_by_queue, fenced_by_queue, now) for name in names]


def done_counts(using: str, known: set[str]) -> dict[str, int]:
    """Done tasks by queue: counted, or on a big PostgreSQL table the planner's estimate."""
    connection = connections[using]
    if connection.vendor != "postgresql" or _table_rows(connection) < DONE_ESTIMATE_ABOVE:
        done = Task.objects.using(using).filter(state=TaskState.DONE)
        return {row["queue"]: row["n"] for row in done.values("queue").annotate(n=Count("id"))}
    with connection.cursor() as cursor:
        cursor.execute(COMMON_QUEUES_SQL)
        names = known | set(cursor.fetchone()[0] or ())
        estimates = {}
        for name in sorted(names):
            cursor.execute(DONE_ESTIMATE_SQL, [name])
            estimates[name] = int(cursor.fetchone()[0][0]["Plan"]["Plan Rows"])
    return estimates


def _table_rows(connection) -> float:
    with connection.cursor() as cursor:
        cursor.execute(TABLE_ROWS_SQL)
        return float(cursor.fetchone()[0] or 0)


def _stats(
    name: str, row: Mapping[str, Any], done: dict, fenced: dict, now: datetime
) -> QueueStats:
    oldest = row.get("oldest")
    return QueueStats(
        queue=name,
        ready=row.get("ready", 0),
        leased=row.get("leased", 0),
        delayed=row.get("delayed", 0),
        done=done.get(name, 0),
        dead=row.get("dead", 0),
        oldest_ready_age_secs=None if oldest is None else max((now - oldest).total_seconds(), 0),
        fenced=fenced.get(name, 0),
    )


QUEUE_GAUGES = (
    ("ready", "rivet_queue_ready", "pending tasks runnable now"),
    ("leased", "rivet_queue_leased", "pending tasks held by a worker's lease"),
    ("delayed", "rivet_queue_delayed", "pending tasks waiting for a run time or a retry"),
    ("done", "rivet_queue_done", "tasks done (estimated on a big PostgreSQL table)"),
    ("dead", "rivet_queue_dead", "tasks in the dead letters"),
    (
        "oldest_ready_age_secs",
        "rivet_queue_oldest_ready_age_seconds",
        "how long the oldest ready task has been runnable (0: none is ready)",
    ),
    ("fenced", "rivet_queue_fenced_writes", "stale acks and fails the fence refused, recorded"),
)


class QueueCollector:
    """The queue gauges, read from the database each time Prometheus scrapes."""

    def __init__(self, using: str) -> None:
        self.using = using

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        stats = queue_overview(self.using)
        for attr, name, text in QUEUE_GAUGES:
            family = GaugeMetricFamily(name, text, labels=["queue"])
            for queue in stats:
                value = getattr(queue, attr)
                family.add_metric([queue.queue], 0.0 if value is None else float(value))
            yield family


def queue_exposition(using: str) -> bytes:
    """The queue gauges in the Prometheus text format."""
    require("prometheus_client", extra="metrics", feature="rivet's Prometheus metrics")
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(using))
    return generate_latest(registry)
