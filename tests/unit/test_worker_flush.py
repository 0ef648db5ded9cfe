"""The worker's handler pool and batched flushes, driven in-process against a MemoryStore.

No thread is started per task; decisions of several attempts go to the store in one call;
nothing counts as done before the flush that wrote it returned; a flush that backs off does
not block the loop; a hung handler keeps its thread and its slot, and gets both back.
"""

from __future__ import annotations

import threading

import pytest

from rivet.errors import StoreUnavailable
from rivet.jobs import JobRegistry, job
from rivet.stores.base import ClaimFailed
from rivet.stores.memory import FakeClock, MemoryStore
from rivet.worker.pool import HandlerPool
from tests.unit.worker_kit import Background, enqueue, make_worker, wait_until


class RecordingStore(MemoryStore):
    """Records the decisions of every flush; may fail or hold the first flushes."""

    def __init__(self, failures: int = 0) -> None:
        super().__init__(clock=FakeClock())
        self.failures = failures
        self.flushes: list[int] = []  # decisions per flush that carried any
        self.counted_before: list[int] = []  # acks the worker had counted at each such flush
        self.worker = None
        self.hold: threading.Event | None = None

    def task_settle_and_claim(self, decisions, **claim):
        if decisions:
            self.counted_before.append(self.worker.counts["acked"] if self.worker else 0)
            self.flushes.append(len(decisions))
            if self.hold is not None:
                self.hold.wait(10)
                self.hold = None
            if len(self.flushes) <= self.failures:
                raise StoreUnavailable("server closed the connection unexpectedly")
        return super().task_settle_and_claim(decisions, **claim)


@pytest.fixture
def jobs() -> JobRegistry:
    return JobRegistry()


def test_handlers_run_on_a_fixed_pool_no_thread_per_task(jobs, monkeypatch):
    ran_on: set[int] = set()
    job("noop", registry=jobs)(lambda ctx: ran_on.add(threading.get_ident()))
    started: list[str] = []
    real_start = threading.Thread.start

    def counting_start(thread):
        started.append(thread.name)
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", counting_start)
    store = MemoryStore(clock=FakeClock())
    ids = [enqueue(store, "noop") for _ in range(120)]
    stats = make_worker(store, jobs, once=True, concurrency=4).run()
    assert stats.acked == 120
    assert {store.task_get(i).state for i in ids} == {"done"}
    handler_threads = [name for name in started if name.startswith("rivet-handler")]
    assert len(handler_threads) == 4, started
    assert len(started) == 5, started  # the four handlers and the guard, whatever the tasks
    assert len(ran_on) <= 4


def test_outcomes_that_arrive_during_a_flush_go_out_together_in_the_next(jobs):
    gate = threading.Event()
    job("first", registry=jobs)(lambda ctx: "first")
    job("gated", registry=jobs)(lambda ctx: gate.wait(10) and "ok")
    store = RecordingStore()
    enqueue(store, "first")
    for _ in range(5):
        enqueue(store, "gated")
    worker = make_worker(store, jobs, once=True, concurrency=6)
    store.worker = worker
    store.hold = threading.Event()  # the first flush (one ack) waits until the rest returned
    threading.Thread(
        target=lambda: (
            wait_until(lambda: store.flushes, "the first flush"),
            gate.set(),
            wait_until(lambda: worker._events.qsize() >= 5, "the other outcomes"),
            store.hold.set(),
        ),
        daemon=True,
    ).start()
    stats = worker.run()
    assert stats.acked == 6
    assert store.flushes == [1, 5]


def test_nothing_counts_as_done_before_its_flush_returned(jobs):
    job("noop", registry=jobs)(lambda ctx: None)
    store = RecordingStore(failures=2)
    ids = [enqueue(store, "noop") for _ in range(3)]
    worker = make_worker(store, jobs, once=True, concurrency=3)
    store.worker = worker
    stats = worker.run()
    # The flushes that failed (before any commit) counted nothing; the third wrote them all.
    assert store.counted_before[:3] == [0, 0, 0]
    assert (stats.acked, stats.lost) == (3, 0)
    assert {store.task_get(i).state for i in ids} == {"done"}


def test_a_flush_that_backs_off_does_not_block_the_loop(jobs):
    """While the first ack waits out a failed write, a second attempt's outcome joins it."""
    second = threading.Event()
    job("first", registry=jobs)(lambda ctx: "one")
    job("second", registry=jobs)(lambda ctx: second.wait(10) and "two")
    store = RecordingStore(failures=3)
    enqueue(store, "first")
    enqueue(store, "second")
    worker = make_worker(store, jobs, once=True, concurrency=2)
    store.worker = worker
    threading.Thread(
        target=lambda: (wait_until(lambda: store.flushes, "a failed flush"), second.set()),
        daemon=True,
    ).start()
    stats = worker.run()
    assert stats.acked == 2
    assert store.flushes[0] == 1 and store.flushes[-1] == 2, store.flushes


def test_a_hung_handler_keeps_its_thread_and_slot_until_it_returns(jobs):
    release = threading.Event()
    threads: dict[str, set[str]] = {"stuck": set(), "noop": set()}

    @job("stuck", registry=jobs)
    def stuck(ctx):
        threads["stuck"].add(threading.current_thread().name)
        release.wait(30)  # ignores should_stop: abandoned after a lease past its stop

    job("noop", registry=jobs)(lambda ctx: threads["noop"].add(threading.current_thread().name))
    store = MemoryStore(clock=FakeClock())
    enqueue(store, "stuck", max_attempts=1)
    worker = make_worker(
        store, jobs, concurrency=2, max_abandoned=2, lease_ttl=0.2, job_timeout=0.1
    )
    bg = Background(worker)
    try:
        wait_until(lambda: worker.counts["abandoned"] == 1, "the stuck handler to be abandoned")
        assert worker.busy_slots() == 1  # the abandoned handler still holds its slot
        for _ in range(3):
            enqueue(store, "noop")
        wait_until(lambda: store.queue_stats("q").done == 3, "the others, on the free slot")
        assert len(threads["noop"]) == 1 and threads["noop"].isdisjoint(threads["stuck"])
        release.set()
        wait_until(lambda: worker.busy_slots() == 0, "the stuck handler to rejoin")
        for _ in range(4):
            enqueue(store, "noop")
        wait_until(lambda: store.queue_stats("q").done == 7, "the rest, on both threads")
    finally:
        release.set()
    stats = bg.stop()
    assert (stats.abandoned, stats.exit_code, stats.acked) == (1, 0, 7)
    assert len(worker.handlers.threads) == 2  # no thread was started in its place


def test_the_pool_ends_its_idle_threads_on_close():
    seen: list[int] = []
    pool = HandlerPool(3, seen.append, name="test-pool")
    pool.start()
    for n in range(10):
        pool.submit(n)
    pool.close()
    for thread in pool.threads:
        thread.join(timeout=10)
    assert sorted(seen) == list(range(10))
    assert not any(thread.is_alive() for thread in pool.threads)


class ClaimFailsAfterSettling(MemoryStore):
    """Commits a flush's decisions, then fails its claim, as PostgreSQL may between statements."""

    def task_settle_and_claim(self, decisions, **claim):
        if not decisions:
            return super().task_settle_and_claim(decisions, **claim)
        settled = self.task_settle(decisions)
        raise ClaimFailed("the claim statement failed", settled=settled)


def test_a_claim_that_fails_after_its_flush_committed_still_reports_the_acks(jobs, caplog):
    job("noop", registry=jobs)(lambda ctx: "ok")
    store = ClaimFailsAfterSettling(clock=FakeClock())
    task_id = enqueue(store, "noop")
    stats = make_worker(store, jobs, once=True).run()
    assert (stats.acked, stats.lost, stats.exit_code) == (1, 0, 0)
    assert store.task_get(task_id).state == "done"
    assert "claim_failed" in caplog.text
