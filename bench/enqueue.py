"""Enqueue speed, measured from outside: the producer API called in a loop, timed by the caller.

``measure_enqueue`` is what ``rivet_chaos bench`` reports as enqueue/s. It times what a
producer pays: ``rivet.enqueue`` one call at a time (each its own transaction, committed before
the next call), and ``rivet.enqueue_many`` in batches, on the configured store (PostgreSQL
in the bench). The bench queue is emptied before and after, so the figures never depend on
what an earlier run left behind, and the run leaves nothing behind either.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from django.db import connections

from chaos_project.kit import queries
from rivet.conf import rivet_settings
from rivet.producer import enqueue, enqueue_many, resolve_store, task_spec
from rivet.values import TaskSpec

#: Kind of the measured tasks: the bench's noop, never run here (no worker is started).
KIND = "noop"


def measure_enqueue(
    single: int = 5000,
    bulk: int = 200_000,
    batch: int = 10_000,
    queue: str = "bench",
    *,
    runs: int = 1,
    payload_bytes: int = 100,
    keyed: bool = False,
) -> dict[str, Any]:
    """Time ``single`` one-at-a-time enqueues and ``bulk`` tasks enqueued ``batch`` at a time.

    Each of the ``runs`` rounds measures both; the figures are the medians over the rounds.
    ``keyed`` gives every task an idempotency key (the dedup path). Returns
    ``{"single_per_s", "bulk_per_s", "single_store_per_s", "bulk_store_per_s", "single_secs",
    "bulk_secs", "single_runs", "bulk_runs", "single", "bulk", "batch", "payload_bytes",
    "keyed"}``, the ``*_runs`` being every round's figure and ``*_store_per_s`` the same tasks
    through the store's own call, validated beforehand (what the statements allow). The bench
    queue is emptied before each measurement and after the last. A count of 0 skips that
    measurement (its rate and seconds read 0.0).
    """
    if min(single, bulk) < 0 or min(batch, runs) < 1 or single + bulk == 0:
        raise ValueError(
            "single and bulk must be >= 0 (0: not measured) and not both 0, batch and runs"
            f" >= 1; got single={single}, bulk={bulk}, batch={batch}, runs={runs}"
        )
    pad = "x" * payload_bytes
    single_runs, bulk_runs, single_store, bulk_store = [], [], [], []
    try:
        for round_ in range(runs):
            tag = f"{time.time_ns()}-{round_}"
            if single:
                empty_queue(queue)
                single_runs.append(_time_single(single, queue, pad, keyed and f"s{tag}"))
                empty_queue(queue)
                specs = _specs(single, queue, pad, keyed and f"S{tag}")
                single_store.append(_time_store_single(specs))
            if bulk:
                empty_queue(queue)
                bulk_runs.append(_time_bulk(bulk, batch, queue, pad, keyed and f"b{tag}"))
                empty_queue(queue)
                specs = _specs(bulk, queue, pad, keyed and f"B{tag}")
                bulk_store.append(_time_store_bulk(specs, batch))
    finally:
        empty_queue(queue)
    return {
        "single_per_s": _median(single_runs),
        "bulk_per_s": _median(bulk_runs),
        "single_store_per_s": _median(single_store),
        "bulk_store_per_s": _median(bulk_store),
        "single_secs": round(single / _median(single_runs), 3) if single else 0.0,
        "bulk_secs": round(bulk / _median(bulk_runs), 3) if bulk else 0.0,
        "single_runs": single_runs,
        "bulk_runs": bulk_runs,
        "single": single,
        "bulk": bulk,
        "batch": batch,
        "payload_bytes": payload_bytes,
        "keyed": keyed,
    }


def _specs(count: int, queue: str, pad: str, key_prefix: str | bool) -> list[TaskSpec]:
    """The tasks _time_single and _time_bulk enqueue, validated (outside the timing)."""
    return [
        task_spec(
            KIND,
            {"n": n, "pad": pad},
            queue=queue,
            idem_key=f"{key_prefix}-{n}" if key_prefix else None,
        )
        for n in range(count)
    ]


def _time_store_single(specs: list[TaskSpec]) -> float:
    """The store's own enqueue, one task a call: the statement and its commit, without the
    producer API around it (validation, defaults, finding the store)."""
    store = resolve_store()
    started = time.perf_counter()
    for spec in specs:
        store.task_enqueue(spec)
    return len(specs) / (time.perf_counter() - started)


def _time_store_bulk(specs: list[TaskSpec], batch: int) -> float:
    """The store's own bulk enqueue, ``batch`` validated tasks a call."""
    store = resolve_store()
    started = time.perf_counter()
    for start in range(0, len(specs), batch):
        store.task_enqueue_many(specs[start : start + batch])
    return len(specs) / (time.perf_counter() - started)


def _median(rates: list[float]) -> float:
    """The median rate of the rounds; 0.0 for a measurement that was not asked for."""
    return statistics.median(rates) if rates else 0.0


def empty_queue(queue: str) -> None:
    """Delete the queue's tasks and fenced-write records (other queues are left alone)."""
    with connections[rivet_settings.DATABASE_ALIAS].cursor() as cursor:
        cursor.execute(queries.QUEUE_EMPTY_ONE, {"queue": queue})


def _time_single(count: int, queue: str, pad: str, key_prefix: str | bool) -> float:
    started = time.perf_counter()
    for n in range(count):
        key = f"{key_prefix}-{n}" if key_prefix else None
        enqueue(KIND, {"n": n, "pad": pad}, queue=queue, idem_key=key)
    return count / (time.perf_counter() - started)


def _time_bulk(count: int, batch: int, queue: str, pad: str, key_prefix: str | bool) -> float:
    items = [
        {
            "kind": KIND,
            "payload": {"n": n, "pad": pad},
            "queue": queue,
            "idem_key": f"{key_prefix}-{n}" if key_prefix else None,
        }
        for n in range(count)
    ]
    started = time.perf_counter()
    for start in range(0, count, batch):
        enqueue_many(items[start : start + batch])
    return count / (time.perf_counter() - started)
