"""A worker's own Prometheus metrics (``rivet_worker --metrics-port N`` or ``RIVET_METRICS_PORT``).

Counters of claims, acks, retries, dead, fenced, lost and abandoned attempts, labelled by queue
and kind; the handler duration (histogram); the busy and total slots and the longest database
wait in progress (gauges).
:class:`WorkerMetrics` is called at the points where the worker already counts those events;
with metrics off the worker holds :data:`NO_METRICS`, whose methods do nothing. The queue
gauges a host serves are ``rivet.metrics``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rivet.extras import require
from rivet.values import Claimed

#: The worker's counters: the name of the event in the worker -> the metric's name.
WORKER_EVENTS = {
    "claimed": ("rivet_worker_claims", "attempts started under a fresh lease"),
    "acked": ("rivet_worker_acks", "attempts acked: the task is done"),
    "retried": ("rivet_worker_retries", "attempts that failed and will be retried"),
    "dead": ("rivet_worker_dead", "attempts that failed on the last try: the task is dead"),
    "fenced": ("rivet_worker_fenced", "writes the fence refused: the lease was claimed again"),
    "lost": ("rivet_worker_lost", "attempts left to lapse: no heartbeat or write succeeded"),
    "abandoned": ("rivet_worker_abandoned", "handler threads still running long after a stop"),
}
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class NoMetrics:
    """Metrics off: every event is dropped at the cost of one method call."""

    def prime(self, queues: Iterable[str], kinds: Iterable[str]) -> None:
        pass

    def event(self, name: str, claimed: Claimed) -> None:
        pass

    def handler_seconds(self, claimed: Claimed, seconds: float) -> None:
        pass

    def buried(self, count: int) -> None:
        pass


NO_METRICS = NoMetrics()


class WorkerMetrics(NoMetrics):
    """One worker's metrics, in a registry of its own (several workers may share a process)."""

    def __init__(
        self,
        *,
        slots: int,
        busy: Callable[[], float],
        busy_async: Callable[[], float] | None = None,
        db_wait: Callable[[], float] | None = None,
    ) -> None:
        # Imported here: a worker without metrics starts without prometheus_client.
        require("prometheus_client", extra="metrics", feature="rivet's Prometheus metrics")
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        self.counters = {
            event: Counter(name, text, ["queue", "kind"], registry=self.registry)
            for event, (name, text) in WORKER_EVENTS.items()
        }
        self.duration = Histogram(
            "rivet_worker_handler_duration_seconds",
            "how long handlers ran, from start to return or raise",
            ["queue", "kind"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.buried_total = Counter(
            "rivet_worker_buried",
            "exhausted tasks a claim buried on the way (no handler ran)",
            registry=self.registry,
        )
        Gauge(
            "rivet_worker_slots", "handlers this worker runs at once", registry=self.registry
        ).set(slots)
        busy_slots = "slots whose handler has not returned"
        Gauge("rivet_worker_slots_busy", busy_slots, registry=self.registry).set_function(busy)
        Gauge(
            "rivet_worker_async_in_flight",
            "async def handlers running on the worker's event loop",
            registry=self.registry,
        ).set_function(busy_async or (lambda: 0.0))
        Gauge(
            "rivet_worker_db_wait_seconds",
            "how long the longest database call in progress has waited (0: none)",
            registry=self.registry,
        ).set_function(db_wait or (lambda: 0.0))

    def prime(self, queues: Iterable[str], kinds: Iterable[str]) -> None:
        """Export every counter (and the handler histogram) at 0 for each queue and kind.

        A labelled series exists only once its labels are used, and Prometheus's increase()
        and rate() see nothing in a series whose first sample is already 1: the first lost or
        abandoned attempt after a start would raise no alert. The worker calls this before it
        claims, with its queues and the kinds it has handlers for, so every series it can move
        begins at 0. A kind without a handler (claimed, then failed) starts at its first event.
        """
        kinds = list(kinds)
        for queue in queues:
            for kind in kinds:
                for counter in self.counters.values():
                    counter.labels(queue, kind)
                self.duration.labels(queue, kind)

    def event(self, name: str, claimed: Claimed) -> None:
        self.counters[name].labels(claimed.queue, claimed.kind).inc()

    def handler_seconds(self, claimed: Claimed, seconds: float) -> None:
        self.duration.labels(claimed.queue, claimed.kind).observe(seconds)

    def buried(self, count: int) -> None:
        self.buried_total.inc(count)

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        """Answer scrapes on ``addr:port`` from a daemon thread (the worker's own process)."""
        from prometheus_client import disable_created_metrics, start_http_server

        disable_created_metrics()  # the *_created series double every counter for no use here
        start_http_server(port, addr=addr, registry=self.registry)
