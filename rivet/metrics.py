"""The queue gauges a host serves to Prometheus (``rivet/metrics/``), read at scrape time.

A worker's own counters are ``rivet.worker.metrics``. Here, each scrape reads every queue's
counts from ``Store.queue_overview``, the read the admin, the HTTP API and ``rivet_stats``
share: its cost follows the live rows, and past DONE_COUNT_LIMIT a queue's done gauge is
PostgreSQL's estimate.
"""

from __future__ import annotations

from collections.abc import Iterator
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
    """The queue gauges, read from the database each time Prometheus scrapes."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        stats = self.store.queue_overview()
        for attr, name, text in QUEUE_GAUGES:
            family = GaugeMetricFamily(name, text, labels=["queue"])
            for queue in stats:
                value = getattr(queue, attr)
                family.add_metric([queue.queue], 0.0 if value is None else float(value))
            yield family


def queue_exposition(store: Store) -> bytes:
    """The queue gauges in the Prometheus text format."""
    require("prometheus_client", extra="metrics", feature="rivet's Prometheus metrics")
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(store))
    return generate_latest(registry)
