"""The queue gauges a host serves to Prometheus (``rivet/metrics/``), read at scrape time.

A worker's own counters are ``rivet.worker.metrics``. Here, each scrape reads every queue's
counts, on every database that holds queues, from ``Store.queue_overview``, the read the admin,
the HTTP API and ``rivet_stats`` share: its cost follows the live rows, and past
DONE_COUNT_LIMIT a queue's done gauge is PostgreSQL's estimate.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from rivet.extras import require
from rivet.stores.base import Store

QUEUE_GAUGES = (
    ("ready", "rivet_queue_ready", "pending tasks runnable now"),
    ("leased", "rivet_queue_leased", "pending tasks held by a worker's lease"),
    ("delayed", "rivet_queue_delayed", "pending tasks waiting for a run time or a retry"),
    ("done", "rivet_queue_done", "tasks done (past 10 000, PostgreSQL's estimate)"),
    ("dead", "rivet_queue_dead", "tasks in the dead letters"),
    (
        "oldest_ready_age_secs",
        "rivet_queue_oldest_ready_age_seconds",
        "how long the oldest ready task has been runnable (0: none is ready)",
    ),
    (
        "fenced",
        "rivet_queue_fenced_writes",
        "stale acks, fails and heartbeats the fence refused, recorded",
    ),
)


class QueueCollector:
    """The queue gauges, read from the database each time Prometheus scrapes.

    Given several (alias, store) pairs (queues on more than one database, ``rivet.routing``),
    every gauge carries a ``database`` label beside ``queue``; given one store, only ``queue``.
    """

    def __init__(self, stores: Store | Sequence[tuple[str, Store]]) -> None:
        self.stores = [("", stores)] if isinstance(stores, Store) else list(stores)

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        labelled = len(self.stores) > 1
        stats = [(alias, queue) for alias, store in self.stores for queue in store.queue_overview()]
        for attr, name, text in QUEUE_GAUGES:
            family = GaugeMetricFamily(
                name, text, labels=["queue", "database"] if labelled else ["queue"]
            )
            for alias, queue in stats:
                value = getattr(queue, attr)
                labels = [queue.queue, alias] if labelled else [queue.queue]
                family.add_metric(labels, 0.0 if value is None else float(value))
            yield family


def queue_exposition(stores: Store | Sequence[tuple[str, Store]]) -> bytes:
    """The queue gauges in the Prometheus text format, of one store or of (alias, store) pairs."""
    require("prometheus_client", extra="metrics", feature="rivet's Prometheus metrics")
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(stores))
    return generate_latest(registry)
