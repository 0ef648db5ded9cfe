"""``async def`` jobs: registration, and the Worker running them on its event loop.

In-process against a MemoryStore (helpers in worker_kit.py). Waits poll a condition; no
assertion is on how long something took.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time

import pytest

from rivet.errors import InvalidInput
from rivet.jobs import JobContext, job
from rivet.values import CANCELLED_SUFFIX
from rivet.worker.aio import KindMix
from rivet.worker.stats import EXIT_ABANDONED
from tests.unit.worker_kit import Background, enqueue, make_worker, wait_until

# -- registration -------------------------------------------------------------------------


def test_an_async_function_or_class_registers_as_async_and_a_def_as_sync(jobs):
    @job("a.fn", registry=jobs)
    async def fn(ctx):
        return 1

    @job("a.cls", registry=jobs)
    class Cls:
        async def handle(self, ctx):
            return 2

    @job("s.fn", registry=jobs)
    def plain(ctx):
        return 3

    class Callable:
        async def __call__(self, ctx):
            return 4

    async def takes(extra, ctx):
        return extra

    job("a.obj", registry=jobs)(Callable())
    job("a.partial", registry=jobs)(functools.partial(takes, 5))
    assert [jobs.get(n).is_async for n in ("a.fn", "a.cls", "a.obj", "a.partial")] == [True] * 4
    assert jobs.get("s.fn").is_async is False


@pytest.mark.parametrize(
    ("target", "says"),
    [
        pytest.param(lambda: _async_gen, "async generator", id="async-generator"),
        pytest.param(lambda: _gen, "generator function", id="generator"),
        pytest.param(lambda: 42, "must be a function", id="not-callable"),
        pytest.param(lambda: _BothWays, "both handle and ahandle", id="class-mixing-both"),
        pytest.param(lambda: _NoHandle, "has no handle", id="class-without-handle"),
        pytest.param(lambda: _YieldingHandle, "async generator", id="class-yielding-handle"),
    ],
)
def test_a_handler_that_is_neither_sync_nor_async_is_refused_at_registration(jobs, target, says):
    with pytest.raises(InvalidInput, match=says):
        job("bad", registry=jobs)(target())
    assert jobs.find("bad") is None


async def _async_gen(ctx):
    yield 1


def _gen(ctx):
    yield 1


class _BothWays:
    def handle(self, ctx):
        return 1

    async def ahandle(self, ctx):
        return 1


class _NoHandle:
    def run(self, ctx):
        return 1


class _YieldingHandle:
    async def handle(self, ctx):
        yield 1


# -- running -----------------------------------------------------------------------------


def test_async_and_sync_jobs_run_beside_each_other_from_one_queue(store, jobs):
    threads: dict[str, set[str]] = {"async": set(), "sync": set()}

    @job("a", registry=jobs)
    async def a(ctx):
        threads["async"].add(threading.current_thread().name)
        await asyncio.sleep(0)
        return {"async": ctx.payload}

    @job("s", registry=jobs)
    def s(ctx):
        threads["sync"].add(threading.current_thread().name)
        return {"sync": ctx.payload}

    ids = [enqueue(store, "a" if n % 2 else "s", n) for n in range(20)]
    stats = make_worker(store, jobs, once=True).run()
    assert (stats.acked, stats.exit_code) == (20, 0)
    for n, task_id in enumerate(ids):
        assert store.task_get(task_id).result == ({"async": n} if n % 2 else {"sync": n})
    assert threads["async"] == {"rivet-async"}
    assert all(name.startswith("rivet-handler") for name in threads["sync"])


def test_a_worker_that_claims_only_sync_tasks_starts_no_event_loop(store, jobs):
    job("s", registry=jobs)(lambda ctx: None)

    @job("a", registry=jobs)  # registered, never enqueued
    async def a(ctx):
        return None

    enqueue(store, "s")
    worker = make_worker(store, jobs, once=True)
    assert worker.aio is None
    assert worker.run().acked == 1
    assert worker.aio is None
    assert not [t for t in threading.enumerate() if t.name.startswith("rivet-async")]


def test_many_async_handlers_are_in_flight_at_once_on_one_loop(store, jobs):
    total = 60
    inside: list[int] = []
    everyone = asyncio.Event()  # made off-loop; only the loop thread touches it after

    @job("gather", registry=jobs)
    async def gather(ctx):
        inside.append(ctx.task_id)
        if len(inside) == total:
            everyone.set()
        await everyone.wait()  # returns only once all are in flight together
        return len(inside)

    for _ in range(total):
        enqueue(store, "gather")
    stats = make_worker(store, jobs, once=True, concurrency=1, async_concurrency=total).run()
    assert (stats.acked, stats.exit_code) == (total, 0)


def test_async_concurrency_bounds_the_coroutines_in_flight(store, jobs):
    running = 0
    most = 0

    @job("count", registry=jobs)
    async def count(ctx):
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.01)
        running -= 1

    for _ in range(30):
        enqueue(store, "count")
    stats = make_worker(store, jobs, once=True, async_concurrency=3).run()
    assert stats.acked == 30
    assert 1 <= most <= 3


def test_a_timeout_cancels_the_coroutine_and_the_attempt_fails(store, jobs):
    seen: list[str] = []

    @job("slow", registry=jobs, timeout=0.2, max_attempts=1)
    async def slow(ctx):
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append(f"cancelled, should_stop={ctx.should_stop}")
            raise

    task_id = enqueue(store, "slow", max_attempts=1)
    stats = make_worker(store, jobs, once=True).run()
    assert seen == ["cancelled, should_stop=True"]
    task = store.task_get(task_id)
    assert task.state == "dead"
    assert "timed out after 0.2s" in task.last_error
    assert (stats.dead, stats.abandoned, stats.exit_code) == (1, 0, 0)


def test_a_coroutine_that_swallows_its_cancel_is_abandoned_and_the_worker_exits_3(
    store, jobs, caplog
):
    release = threading.Event()

    @job("stubborn", registry=jobs, timeout=0.1, max_attempts=1)
    async def stubborn(ctx):
        while not release.is_set():
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                pass  # the defect under test: the cancel is swallowed
        return "late"

    task_id = enqueue(store, "stubborn", max_attempts=1)
    worker = make_worker(store, jobs, lease_ttl=0.6, async_concurrency=2, max_abandoned=1)
    running = Background(worker)
    wait_until(lambda: worker.counts["abandoned"] == 1, "the coroutine abandoned")
    release.set()
    stats = running.stop()
    assert store.task_get(task_id).state == "dead"  # the timeout's failure, never the result
    assert stats.abandoned == 1 and stats.acked == 0
    assert stats.exit_code == EXIT_ABANDONED
    assert "abandoned" in caplog.text and "cancel_ignored" in caplog.text


def test_an_operator_cancel_cancels_the_running_coroutine(store, jobs):
    started = threading.Event()
    seen: list[str] = []

    @job("long", registry=jobs)
    async def long(ctx):
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append(ctx.stop_reason)
            raise

    task_id = enqueue(store, "long")
    worker = make_worker(store, jobs, lease_ttl=0.6)
    running = Background(worker)
    wait_until(started.is_set, "the handler running")
    store.task_cancel(task_id)
    wait_until(lambda: store.task_get(task_id).state == "dead", "the task buried")
    stats = running.stop()
    assert seen == [CANCELLED_SUFFIX]
    assert CANCELLED_SUFFIX in store.task_get(task_id).last_error
    assert (stats.cancelled, stats.acked, stats.exit_code) == (1, 0, 0)


def test_retries_then_the_async_failed_hook_runs_once_with_the_error(store, jobs):
    hooked: list[tuple[int, str, str]] = []

    async def on_failed(ctx, error):
        await asyncio.sleep(0)
        hooked.append((ctx.attempt, str(error), threading.current_thread().name))

    @job("flaky", registry=jobs, max_attempts=3, failed=on_failed)
    async def flaky(ctx):
        await asyncio.sleep(0)
        raise ValueError(f"no luck on attempt {ctx.attempt}")

    task_id = enqueue(store, "flaky", max_attempts=3)
    stats = make_worker(store, jobs, once=True).run()
    assert store.task_get(task_id).state == "dead"
    assert (stats.failed, stats.retried, stats.dead) == (3, 2, 1)
    assert hooked == [(3, "no luck on attempt 3", "rivet-async")]


def test_a_sync_failed_hook_on_an_async_job_and_a_broken_async_hook_are_run(store, jobs, caplog):
    hooked: list[str] = []

    @job("a", registry=jobs, max_attempts=1, failed=lambda ctx, e: hooked.append(str(e)))
    async def a(ctx):
        raise ValueError("a broke")

    async def broken(ctx, error):
        raise RuntimeError("the hook broke too")

    @job("b", registry=jobs, max_attempts=1, failed=broken)
    async def b(ctx):
        raise ValueError("b broke")

    enqueue(store, "a", max_attempts=1)
    enqueue(store, "b", max_attempts=1)
    stats = make_worker(store, jobs, once=True).run()
    assert stats.dead == 2 and stats.exit_code == 0
    assert hooked == ["a broke"]
    assert "failed_hook_error" in caplog.text and "the hook broke too" in caplog.text


def test_context_check_raises_in_a_stopped_coroutine_and_wait_is_refused_on_the_loop(store, jobs):
    @job("waits", registry=jobs, max_attempts=1)
    async def waits(ctx):
        ctx.wait(0.01)

    task_id = enqueue(store, "waits", max_attempts=1)
    make_worker(store, jobs, once=True).run()
    assert "context.wait() blocks the event loop" in store.task_get(task_id).last_error

    context = JobContext(task_id=1, queue="q", kind="k", payload=None, attempt=1, max_attempts=1)
    context._stop.set("told to")
    with pytest.raises(Exception, match="told to"):
        context.check()


def test_a_plain_def_returning_a_coroutine_fails_with_a_clear_error(store, jobs):
    async def helper():
        return 1

    @job("forgot", registry=jobs, max_attempts=1)
    def forgot(ctx):
        return helper()

    task_id = enqueue(store, "forgot", max_attempts=1)
    make_worker(store, jobs, once=True).run()
    error = store.task_get(task_id).last_error
    assert "is a plain def but returned a coroutine" in error and "async def" in error


def test_a_handler_that_blocks_the_loop_is_reported_and_keeps_its_lease(store, jobs, caplog):
    @job("blocker", registry=jobs)
    async def blocker(ctx):
        time.sleep(1.5)  # the defect under test: a sync sleep on the event loop
        return "done"

    task_id = enqueue(store, "blocker")
    stats = make_worker(store, jobs, once=True, lease_ttl=0.6).run()
    assert store.task_get(task_id).state == "done"
    assert (stats.acked, stats.fenced, stats.lost) == (1, 0, 0)
    blocked = [r for r in caplog.records if "event_loop_blocked" in r.getMessage()]
    assert blocked and f"task={task_id}" in blocked[0].getMessage().replace(" ", " ")
    assert "event_loop_unblocked" in caplog.text


def test_a_stop_drains_in_flight_coroutines_before_the_worker_returns(store, jobs):
    started: list[int] = []
    gate = threading.Event()

    @job("drained", registry=jobs)
    async def drained(ctx):
        started.append(ctx.task_id)
        while not gate.is_set():
            await asyncio.sleep(0.01)
        return "finished"

    ids = [enqueue(store, "drained") for _ in range(10)]
    worker = make_worker(store, jobs, async_concurrency=10)
    running = Background(worker)
    wait_until(lambda: len(started) == 10, "all ten running")
    worker.stop()
    gate.set()
    stats = running.stop()
    assert (stats.acked, stats.exit_code) == (10, 0)
    assert {store.task_get(i).state for i in ids} == {"done"}


def test_coroutines_still_running_at_the_shutdown_timeout_are_cancelled_and_abandoned(store, jobs):
    cancelled: list[int] = []

    @job("forever", registry=jobs)
    async def forever(ctx):
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(ctx.task_id)
            raise

    task_id = enqueue(store, "forever")
    worker = make_worker(store, jobs, shutdown_timeout=0.2)
    running = Background(worker)
    wait_until(lambda: store.queue_stats("q").leased == 1, "the task leased")
    stats = running.stop()
    assert cancelled == [task_id]
    assert store.task_get(task_id).state != "done"  # its lease lapses; delivered again
    assert stats.exit_code == EXIT_ABANDONED


def test_priority_orders_async_claims_as_sync_ones(store, jobs):
    order: list[int] = []

    @job("p", registry=jobs)
    async def p(ctx):
        order.append(ctx.payload)

    for n, priority in enumerate([0, 10, 5]):
        enqueue(store, "p", n, priority=priority)
    make_worker(store, jobs, once=True, async_concurrency=1).run()
    assert order == [1, 2, 0]


# -- claim sizing -------------------------------------------------------------------------


def test_the_claim_fills_the_pool_a_steady_mix_needs_and_at_most_one_extra_of_a_kind():
    mix = KindMix()
    for _ in range(200):
        mix.observe(False)  # sync tasks only, lately
    assert mix.claim_size(sync_free=4, async_free=100) <= 5 + 1
    assert mix.claim_size(sync_free=0, async_free=100) <= 1
    for _ in range(200):
        mix.observe(True)  # async only, lately
    assert 100 <= mix.claim_size(sync_free=4, async_free=100) <= 104
    assert mix.claim_size(sync_free=0, async_free=0) == 0
    assert mix.claim_size(sync_free=-3, async_free=100) == 0  # sync tasks wait: claim none


def test_async_attempts_are_counted_and_timed_and_shown_in_flight_apart_from_the_slots(store, jobs):
    from tests.unit.worker_kit import counted

    gate = threading.Event()
    inside: list[int] = []

    @job("m", registry=jobs)
    async def m(ctx):
        inside.append(ctx.task_id)
        while not gate.is_set():
            await asyncio.sleep(0.01)

    for _ in range(3):
        enqueue(store, "m")
    worker = make_worker(store, jobs, metrics=True, async_concurrency=5)
    running = Background(worker)
    wait_until(lambda: len(inside) == 3, "three in flight")
    scrape = worker.metrics.registry.get_sample_value
    assert scrape("rivet_worker_async_in_flight") == 3
    assert scrape("rivet_worker_slots_busy") == 0
    gate.set()
    wait_until(lambda: worker.counts["acked"] == 3, "three acked")
    running.stop()
    assert counted(worker, "rivet_worker_acks_total", kind="m") == 3
    assert scrape("rivet_worker_handler_duration_seconds_count", {"queue": "q", "kind": "m"}) == 3


def test_the_async_prefetch_holds_a_tenth_of_a_second_of_work_per_slot():
    from rivet.worker.prefetch import ASYNC_WAIT_BUDGET_SECS, AUTO, Prefetch

    prefetch = Prefetch(AUTO, 500, ASYNC_WAIT_BUDGET_SECS)
    assert prefetch.current() == 0  # nothing observed yet
    prefetch.observe(0.1)
    assert prefetch.current() == 500  # 0.1 s tasks: a round of slots waits, the cap
    for _ in range(200):
        prefetch.observe(1.0)
    assert 45 <= prefetch.current() <= 55  # 1 s tasks: about a tenth of the slots
    fixed = Prefetch(7, 500, ASYNC_WAIT_BUDGET_SECS)
    fixed.observe(0.001)
    assert fixed.current() == 7  # --prefetch N holds N, whatever the budget
