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

from chaos_project.chaos import queries
from rivet.conf import rivet_settings
from rivet.producer import enqueue, enqueue_many

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
    ``{"single_per_s", "bulk_per_s", "single_secs", "bulk_secs", "single_runs", "bulk_runs",
    "single", "bulk", "batch", "payload_bytes", "keyed"}``, the ``*_runs`` being every round's
    figure. The bench queue is emptied before each measurement and after the last. A count of
    0 skips that
    measurement (its rate and seconds read 0.0).
    """
    if min(single, bulk) < 0 or min(batch, runs) < 1 or single + bulk == 0:
        raise ValueError(
            "single and bulk must be >= 0 (0: not measured) and not both 0, batch and runs"
            f" >= 1; got single={single}, bulk={bulk}, batch={batch}, runs={runs}"
        )
    pad = "x" * payload_bytes
    single_runs, bulk_runs = [], []
    try:
        for round_ in range(runs):
            tag = f"{time.time_ns()}-{round_}"
            if single:
                empty_queue(queue)
                single_runs.append(_time_single(single, queue, pad, keyed and f"s{tag}"))
            if bulk:
                empty_queue(queue)
                bulk_runs.append(_time_bulk(bulk, batch, queue, pad, keyed and f"b{tag}"))
    finally:
        empty_queue(queue)
    return {
        "single_per_s": _median(single_runs),
        "bulk_per_s": _median(bulk_runs),
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
