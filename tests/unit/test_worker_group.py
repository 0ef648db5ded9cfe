"""WorkerGroup: one Worker per database in one process (rivet.worker.group), on MemoryStores.

Two MemoryStores stand in for two databases; each Worker claims only from its own.
"""

from __future__ import annotations

import pytest

from rivet.jobs import job
from rivet.stores.memory import MemoryStore
from rivet.worker.group import WorkerGroup
from tests.unit.worker_kit import Background, enqueue, make_worker


def test_each_worker_runs_its_own_store_and_the_counts_add_up(jobs):
    job("echo", registry=jobs)(lambda ctx: ctx.payload)
    first, second = MemoryStore(), MemoryStore()
    ids = {id(store): [enqueue(store, "echo", n) for n in range(3)] for store in (first, second)}
    group = WorkerGroup(
        [make_worker(store, jobs, once=True, queues=["q"]) for store in (first, second)]
    )
    stats = group.run()
    assert (stats.acked, stats.claimed, stats.exit_code) == (6, 6, 0)
    for store in (first, second):
        assert [store.task_get(i).state for i in ids[id(store)]] == ["done"] * 3


def test_one_worker_that_stops_stops_the_others(jobs):
    group = WorkerGroup([make_worker(MemoryStore(), jobs) for _ in range(2)])
    running = Background(group)  # type: ignore[arg-type]  # a group runs and stops as a Worker
    group.workers[1].stop()  # as --max-jobs or too many abandoned handlers would
    running.thread.join(timeout=15)
    assert not running.thread.is_alive(), "the other worker did not stop"
    assert running.stats is not None and running.stats.exit_code == 0
    assert all(worker.stopping for worker in group.workers)


def test_a_worker_that_raises_stops_the_others_and_run_raises_it(jobs, monkeypatch):
    healthy, broken = (make_worker(MemoryStore(), jobs) for _ in range(2))

    def fail() -> None:
        raise RuntimeError("the loop broke")

    monkeypatch.setattr(broken, "run", fail)
    group = WorkerGroup([healthy, broken])
    with pytest.raises(RuntimeError, match="the loop broke"):
        group.run()
    assert healthy.stopping


def test_a_group_needs_a_worker():
    with pytest.raises(ValueError, match="at least one Worker"):
        WorkerGroup([])
