"""Helpers for the Worker driven in-process against a MemoryStore (tests/unit/test_worker_*.py).

Handlers are registered in a private JobRegistry per test. A worker that runs until stopped is
driven on a thread (``Background``); waits poll a condition with a generous limit and never
assert on how long something took.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from rivet.failpoints import Failpoints
from rivet.jobs import JobContext, JobRegistry, job
from rivet.retry import RetryPolicy
from rivet.stores.memory import MemoryStore
from rivet.validation import build_spec
from rivet.worker import Worker, WorkerConfig, WorkerStats

NO_WAIT = RetryPolicy(backoff_secs=0.0, cap_secs=0.0)


def wait_until(predicate: Callable[[], bool], what: str, limit: float = 10.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.01)


def counted(worker: Worker, name: str, **labels: str) -> float:
    """A worker metric's value for queue "q" (0 when it was never counted)."""
    value = worker.metrics.registry.get_sample_value(name, {"queue": "q", **labels})
    return value or 0.0


class RecordingAbort:
    """An abort for Failpoints that records the point instead of killing the test process."""

    def __init__(self, raise_it: bool) -> None:
        self.raise_it = raise_it
        self.count = 0

    def __call__(self) -> None:
        self.count += 1
        if self.raise_it:
            raise Aborted()


class Aborted(BaseException):
    """Stands in for SIGABRT: nothing after the failpoint runs."""


def enqueue(store: MemoryStore, kind: str, payload=None, queue: str = "q", **options) -> int:
    return store.task_enqueue(
        build_spec(queue=queue, kind=kind, payload=payload, **options)
    ).task_id


#: Worker keyword arguments that are collaborators, not configuration.
COLLABORATORS = frozenset(
    {"registry", "retry_policy", "clock", "failpoints", "metrics", "pruner", "scheduler"}
)


def make_worker(store: MemoryStore, jobs: JobRegistry, **options) -> Worker:
    """A Worker for a unit test: its config from the defaults here, overridden by ``options``."""
    settings = {
        "queues": ["q"],
        "owner": "unit:1",
        "lease_ttl": 5.0,
        "concurrency": 2,
        "prefetch": 0,  # claims only into free slots; tests/unit/test_worker_prefetch.py waits
        "retry_policy": NO_WAIT,
        "poll_interval": 0.02,
        "shutdown_timeout": 5.0,
        "registry": jobs,
        "failpoints": Failpoints(),
        **options,
    }
    runtime = {key: value for key, value in settings.items() if key in COLLABORATORS}
    config = WorkerConfig(**{k: v for k, v in settings.items() if k not in COLLABORATORS})
    return Worker(config, store=store, **runtime)


class Background:
    """A worker running on a thread until stopped."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.stats: WorkerStats | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.stats = self.worker.run()

    def stop(self) -> WorkerStats:
        self.worker.stop()
        self.thread.join(timeout=15)
        assert not self.thread.is_alive(), "the worker did not stop"
        assert self.stats is not None
        return self.stats


def blocking_job(jobs: JobRegistry, name: str = "block", **options) -> threading.Event:
    """A handler that runs until its context is stopped (or the test releases it)."""
    release = threading.Event()

    @job(name, registry=jobs, **options)
    def block(ctx: JobContext):
        while not ctx.should_stop and not release.is_set():
            time.sleep(0.01)
        return "finished"

    return release
