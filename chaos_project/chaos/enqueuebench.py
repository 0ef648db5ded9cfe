"""Enqueue speed: one ``rivet.enqueue`` call at a time, and ``rivet.enqueue_many`` in batches.

Timed with this process's monotonic clock around the calls (an enqueue's cost is the
producer's wait, which no timestamp on a row can show). Noop tasks with a 100-byte payload go
to ``queue``, which is emptied before and after each part; other queues are left alone.
"""

from __future__ import annotations

import time
from typing import Any

from django.db import connections

from chaos_project.chaos import queries
from rivet.producer import enqueue, enqueue_many

PAYLOAD = {"pad": "x" * 100}


def measure_enqueue(
    single: int = 5000, bulk: int = 200000, batch: int = 10000, queue: str = "bench"
) -> dict[str, Any]:
    """Tasks per second of ``single`` one-at-a-time enqueues and of ``bulk`` tasks in batches.

    Returns ``single_per_s`` and ``bulk_per_s`` (0.0 for a part given 0 tasks), the counts and
    seconds of each part, and ``batch``.
    """
    if min(single, bulk) < 0 or batch < 1:
        raise ValueError(
            f"single and bulk must be >= 0 and batch >= 1, got {single}, {bulk}, {batch}"
        )
    _empty(queue)
    started = time.perf_counter()
    for _ in range(single):
        enqueue("noop", PAYLOAD, queue=queue)
    single_secs = time.perf_counter() - started
    _empty(queue)
    item = {"kind": "noop", "payload": PAYLOAD, "queue": queue}
    started = time.perf_counter()
    for first in range(0, bulk, batch):
        enqueue_many([item] * min(batch, bulk - first))
    bulk_secs = time.perf_counter() - started
    _empty(queue)
    return {
        "single": single,
        "single_secs": round(single_secs, 3),
        "single_per_s": single / single_secs if single else 0.0,
        "bulk": bulk,
        "batch": batch,
        "bulk_secs": round(bulk_secs, 3),
        "bulk_per_s": bulk / bulk_secs if bulk else 0.0,
    }


def _empty(queue: str) -> None:
    with connections["default"].cursor() as cursor:
        cursor.execute(queries.QUEUE_EMPTY_ONE, {"queue": queue})
