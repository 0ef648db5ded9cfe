"""The Worker driven in-process against a MemoryStore: slots, leases, fences, retries, shutdown.

Handlers are registered in a private JobRegistry per test. A worker that runs until stopped is
driven on a thread (``Running``); waits poll a condition with a generous limit and never assert
on how long something took.
"""

from __future__ import annotations

import io
import json
import logging
import threading
import time
from collections.abc import Callable

import pytest

from rivet import signals
from rivet.decisions import EXPIRED_ERROR
from rivet.failpoints import FailpointConfigError, Failpoints, fires, parse, parse_seed
from rivet.jobs import JobContext, JobRegistry, job
from rivet.logs import configure
from rivet.retry import RetryPolicy
from rivet.stores.memory import FakeClock, MemoryStore
from rivet.validation import build_spec
from rivet.values import HANDLER_ERROR_SUFFIX
from rivet.worker import EXIT_ABANDONED, Worker, WorkerStats
from rivet.worker.options import OptionError, resolve

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


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore(clock=FakeClock())


@pytest.fixture
def jobs() -> JobRegistry:
    return JobRegistry()


def enqueue(store: MemoryStore, kind: str, payload=None, queue: str = "q", **options) -> int:
    return store.task_enqueue(
        build_spec(queue=queue, kind=kind, payload=payload, **options)
    ).task_id


def make_worker(store: MemoryStore, jobs: JobRegistry, **options) -> Worker:
    settings = {
        "store": store,
        "queues": ["q"],
        "owner": "unit:1",
        "lease_ttl": 5.0,
        "concurrency": 2,
        "retry_policy": NO_WAIT,
        "poll_interval": 0.02,
        "shutdown_timeout": 5.0,
        "registry": jobs,
        "failpoints": Failpoints(),
    }
    return Worker(**{**settings, **options})


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


# -- running and settling --------------------------------------------------------------------


def test_once_runs_every_runnable_task_then_returns(store, jobs):
    seen: list[int] = []
    job("echo", registry=jobs)(lambda ctx: seen.append(ctx.payload) or {"got": ctx.payload})
    ids = [enqueue(store, "echo", n) for n in range(5)]
    stats = make_worker(store, jobs, once=True).run()
    assert sorted(seen) == list(range(5))
    assert [store.task_get(i).state for i in ids] == ["done"] * 5
    assert store.task_get(ids[3]).result == {"got": 3}
    assert (stats.acked, stats.processed, stats.exit_code) == (5, 5, 0)


def test_a_claim_never_asks_for_more_than_the_free_slots(store, jobs):
    leased_seen: list[int] = []

    @job("count", registry=jobs)
    def count(ctx):
        leased_seen.append(store.queue_stats("q").leased)
        time.sleep(0.01)

    for _ in range(9):
        enqueue(store, "count")
    make_worker(store, jobs, once=True, concurrency=3).run()
    assert len(leased_seen) == 9
    assert max(leased_seen) <= 3


def test_queues_are_tried_in_the_order_given(store, jobs):
    order: list[str] = []
    job("mark", registry=jobs)(lambda ctx: order.append(ctx.queue))
    for _ in range(2):
        enqueue(store, "mark", queue="low")
    for _ in range(2):
        enqueue(store, "mark", queue="high")
    make_worker(store, jobs, queues=["high", "low"], concurrency=1, once=True).run()
    assert order == ["high", "high", "low", "low"]


def test_a_failing_task_retries_with_the_policy_delay_then_dies_and_runs_its_hook(store, jobs):
    bounds: list[tuple[float, float]] = []
    policy = RetryPolicy(
        backoff_secs=1.0, cap_secs=60.0, uniform=lambda a, b: bounds.append((a, b)) or 0.0
    )
    hooked: list[tuple[int, str]] = []

    def on_failed(ctx, error):
        hooked.append((ctx.attempt, str(error)))
        raise RuntimeError("a broken hook must not stop the worker")

    @job("boom", registry=jobs, max_attempts=3, failed=on_failed)
    def boom(ctx):
        raise ValueError(f"bad input on attempt {ctx.attempt}")

    task_id = enqueue(store, "boom", max_attempts=3)
    stats = make_worker(store, jobs, once=True, retry_policy=policy).run()
    task = store.task_get(task_id)
    assert task.state == "dead"
    assert task.attempts == 3
    assert task.last_error == f"ValueError: bad input on attempt 3; {HANDLER_ERROR_SUFFIX}"
    assert bounds == [(0.0, 2.0), (0.0, 4.0), (0.0, 8.0)]
    assert hooked == [(3, "bad input on attempt 3")]
    assert (stats.failed, stats.retried, stats.dead) == (3, 2, 1)


def test_a_retry_is_not_claimed_before_its_delay(store, jobs):
    runs: list[int] = []
    job("flaky", registry=jobs)(lambda ctx: runs.append(ctx.attempt) or 1 / 0)
    task_id = enqueue(store, "flaky")
    policy = RetryPolicy(backoff_secs=10.0, cap_secs=10.0, uniform=lambda a, b: b)
    make_worker(store, jobs, once=True, retry_policy=policy).run()
    assert runs == [1]
    task = store.task_get(task_id)
    assert task.state == "pending" and task.last_error == "ZeroDivisionError: division by zero"
    store.clock.advance(20.0)
    make_worker(store, jobs, once=True, retry_policy=policy).run()
    assert runs == [1, 2]


def test_an_unknown_kind_is_never_run_and_fails_naming_the_kind(store, jobs):
    ran: list[int] = []
    job("known", registry=jobs)(lambda ctx: ran.append(1))
    task_id = enqueue(store, "billing.mystery", max_attempts=2)
    stats = make_worker(store, jobs, once=True).run()
    task = store.task_get(task_id)
    assert ran == []
    assert task.state == "dead" and task.attempts == 2
    assert task.last_error.startswith("UnknownJob: unknown job kind 'billing.mystery'")
    assert stats.failed == 2


def test_a_result_that_is_not_json_fails_the_attempt(store, jobs):
    job("weird", registry=jobs)(lambda ctx: {1, 2})
    task_id = enqueue(store, "weird", max_attempts=1)
    make_worker(store, jobs, once=True).run()
    task = store.task_get(task_id)
    assert task.state == "dead"
    assert task.last_error.startswith("TypeError: handler result is not JSON-serialisable")


def test_max_jobs_stops_after_that_many_attempts(store, jobs):
    job("noop", registry=jobs)(lambda ctx: None)
    ids = [enqueue(store, "noop") for _ in range(5)]
    bg = Background(make_worker(store, jobs, max_jobs=2, concurrency=4))
    bg.thread.join(timeout=10)
    assert not bg.thread.is_alive(), "--max-jobs 2 must stop the worker by itself"
    assert bg.stats.acked == 2
    assert sum(store.task_get(i).state == "done" for i in ids) == 2


# -- the guard: heartbeats, fences, deadlines, timeouts --------------------------------------


def blocking_job(jobs: JobRegistry, name: str = "block", **options) -> threading.Event:
    """A handler that runs until its context is stopped (or the test releases it)."""
    release = threading.Event()

    @job(name, registry=jobs, **options)
    def block(ctx: JobContext):
        while not ctx.should_stop and not release.is_set():
            time.sleep(0.01)
        return "finished"

    return release


def test_heartbeats_keep_a_long_task_leased(store, jobs):
    release = blocking_job(jobs)
    task_id = enqueue(store, "block")
    bg = Background(make_worker(store, jobs, lease_ttl=0.3))
    wait_until(lambda: store.task_get(task_id).attempts == 1, "the claim")
    first = store.task_get(task_id).updated_at
    store.clock.advance(0.2)
    wait_until(lambda: store.task_get(task_id).updated_at > first, "a heartbeat")
    store.clock.advance(0.2)  # past the first lease: only the heartbeat kept it
    assert store.task_claim(queues=["q"], owner="other", limit=1, lease_ttl=1).claimed == []
    release.set()
    wait_until(lambda: store.task_get(task_id).state == "done", "the ack")
    assert bg.stop().acked == 1


def test_a_heartbeat_that_finds_the_lease_taken_stops_the_handler_and_records_the_fence(
    store, jobs
):
    stopped: list[str] = []
    fenced: list[dict] = []

    @job("block", registry=jobs)
    def block(ctx: JobContext):
        ctx.wait(10)
        stopped.append(ctx.stop_reason)
        return "too late"

    def on_fenced(sender, **kwargs):
        fenced.append(kwargs)

    signals.task_fenced.connect(on_fenced)
    try:
        task_id = enqueue(store, "block")
        bg = Background(make_worker(store, jobs, lease_ttl=0.3))
        wait_until(lambda: store.task_get(task_id).attempts == 1, "the claim")
        store.clock.advance(1.0)  # the lease lapses in the store's time
        taken = store.task_claim(queues=["q"], owner="thief", limit=1, lease_ttl=60)
        assert [c.epoch for c in taken.claimed] == [2]
        wait_until(lambda: stopped, "the handler to be stopped")
        wait_until(lambda: store.fenced_count("q") == 1, "the fence record")
        stats = bg.stop()
    finally:
        signals.task_fenced.disconnect(on_fenced)
    assert stopped == ["lease lost (fenced)"]
    task = store.task_get(task_id)
    assert (task.state, task.lease_epoch, task.lease_owner) == ("pending", 2, "thief")
    assert stats.fenced == 1 and stats.acked == 0
    assert fenced[0]["context"].epoch == 1 and fenced[0]["op"] == "fail"


def test_an_ack_with_a_stale_epoch_is_fenced_not_applied(store, jobs):
    gate = threading.Event()

    @job("slow", registry=jobs)
    def slow(ctx):
        gate.wait(10)
        return "stale result"

    class SlowHeartbeats(MemoryStore):
        def lease_extend(self, leases, lease_ttl):
            return {lease.task_id for lease in leases}  # pretends every lease is still held

    slow_store = SlowHeartbeats(clock=store.clock)
    task_id = enqueue(slow_store, "slow")
    bg = Background(make_worker(slow_store, jobs, metrics=True))
    wait_until(lambda: slow_store.task_get(task_id).attempts == 1, "the claim")
    slow_store.clock.advance(10)
    slow_store.task_claim(queues=["q"], owner="thief", limit=1, lease_ttl=60)
    gate.set()
    wait_until(lambda: slow_store.fenced_count("q", "ack") == 1, "the fenced ack")
    stats = bg.stop()
    assert slow_store.task_get(task_id).state == "pending"
    assert stats.fenced == 1
    assert counted(bg.worker, "rivet_worker_fenced_total", kind="slow") == 1
    assert counted(bg.worker, "rivet_worker_acks_total", kind="slow") == 0


def test_a_lapsed_local_deadline_stops_the_handler_and_gives_the_task_back(store, jobs):
    class DeadHeartbeats(MemoryStore):
        def lease_extend(self, leases, lease_ttl):
            raise ConnectionError("database unreachable")

    broken = DeadHeartbeats(clock=store.clock)
    blocking_job(jobs)
    task_id = enqueue(broken, "block")
    bg = Background(make_worker(broken, jobs, lease_ttl=0.2, metrics=True, max_jobs=1))
    wait_until(lambda: bg.worker.settler.counts["lost"] == 1, "the lease to expire locally")
    stats = bg.stop()
    task = broken.task_get(task_id)
    # Never acked: handed back under its epoch, runnable at once, saying why.
    assert (task.state, task.attempts, task.last_error) == ("pending", 1, EXPIRED_ERROR)
    assert task.visible_at <= broken.clock()
    assert stats.acked == 0 and stats.lost == 1
    assert counted(bg.worker, "rivet_worker_lost_total", kind="block") == 1


def test_a_job_timeout_fails_the_attempt_with_the_retry_policy(store, jobs):
    blocking_job(jobs, timeout=0.1)
    task_id = enqueue(store, "block", max_attempts=1)
    stats = make_worker(store, jobs, once=True).run()
    task = store.task_get(task_id)
    assert task.state == "dead"
    assert task.last_error == f"TimeoutError: timed out after 0.1s; {HANDLER_ERROR_SUFFIX}"
    assert stats.failed == 1 and stats.abandoned == 0


def test_a_handler_that_will_not_return_is_abandoned_and_the_worker_exits_3(store, jobs):
    release = threading.Event()
    job("stuck", registry=jobs)(lambda ctx: release.wait(30))
    task_id = enqueue(store, "stuck")
    worker = make_worker(
        store,
        jobs,
        concurrency=1,
        lease_ttl=0.2,
        job_timeout=0.1,
        shutdown_timeout=0.2,
        metrics=True,
    )
    try:
        bg = Background(worker)
        bg.thread.join(timeout=10)
        assert not bg.thread.is_alive(), "a worker whose every slot is stuck must give up"
    finally:
        release.set()
    assert bg.stats.abandoned == 1
    assert counted(worker, "rivet_worker_abandoned_total", kind="stuck") == 1
    assert bg.stats.exit_code == EXIT_ABANDONED
    assert store.task_get(task_id).last_error == "TimeoutError: timed out after 0.1s"


# -- shutdown --------------------------------------------------------------------------------


def test_stop_lets_in_flight_work_finish_and_exits_0(store, jobs):
    gate = threading.Event()
    started = threading.Event()

    @job("gated", registry=jobs)
    def gated(ctx):
        started.set()
        gate.wait(10)
        return "ok"

    task_id = enqueue(store, "gated")
    bg = Background(make_worker(store, jobs, concurrency=1))  # no free slot while it runs
    started.wait(10)
    bg.worker.stop()
    enqueue(store, "gated")  # enqueued after the stop: never claimed
    gate.set()
    stats = bg.stop()
    assert store.task_get(task_id).state == "done"
    assert (stats.acked, stats.claimed, stats.exit_code) == (1, 1, 0)


def test_work_still_running_after_the_shutdown_timeout_is_abandoned_not_acked(store, jobs):
    release = threading.Event()
    started = threading.Event()
    job("stuck", registry=jobs)(lambda ctx: started.set() or release.wait(30))
    task_id = enqueue(store, "stuck")
    bg = Background(make_worker(store, jobs, shutdown_timeout=0.2))
    try:
        started.wait(10)
        stats = bg.stop()
    finally:
        release.set()
    assert stats.exit_code == EXIT_ABANDONED and stats.abandoned == 1
    assert store.task_get(task_id).state == "pending"


# -- signals, failpoints, logs ---------------------------------------------------------------


def test_signals_fire_for_each_attempt(store, jobs):
    events: list[tuple[str, int]] = []
    receivers = {
        "processing": signals.task_processing,
        "processed": signals.task_processed,
        "released": signals.task_released,
        "failed": signals.task_failed,
    }
    handlers = {}
    for name, sig in receivers.items():
        handlers[name] = lambda sender, context, name=name, **kw: events.append(
            (name, context.attempt)
        )
        sig.connect(handlers[name])
    try:
        job("ok", registry=jobs)(lambda ctx: None)
        job("bad", registry=jobs)(lambda ctx: 1 / 0)
        enqueue(store, "ok")
        enqueue(store, "bad", max_attempts=2)
        make_worker(store, jobs, once=True, concurrency=1).run()
    finally:
        for name, sig in receivers.items():
            sig.disconnect(handlers[name])
    assert events == [
        ("processing", 1),
        ("processed", 1),
        ("processing", 1),
        ("released", 1),
        ("processing", 2),
        ("failed", 2),
    ]


@pytest.mark.parametrize("point", ["after_claim", "after_effect_before_ack"])
def test_a_failpoint_before_the_ack_leaves_the_task_pending(store, jobs, point):
    job("noop", registry=jobs)(lambda ctx: None)
    task_id = enqueue(store, "noop")
    abort = RecordingAbort(raise_it=True)
    worker = make_worker(store, jobs, failpoints=Failpoints({point: 1.0}, abort=abort))
    with pytest.raises(Aborted):
        worker.run()
    worker.guard.close()
    task = store.task_get(task_id)
    assert (task.state, task.attempts, abort.count) == ("pending", 1, 1)


def test_after_ack_fires_once_the_task_is_done(store, jobs):
    job("noop", registry=jobs)(lambda ctx: None)
    task_id = enqueue(store, "noop")
    abort = RecordingAbort(raise_it=True)
    worker = make_worker(store, jobs, failpoints=Failpoints({"after_ack": 1.0}, abort=abort))
    with pytest.raises(Aborted):
        worker.run()
    worker.guard.close()
    assert store.task_get(task_id).state == "done"


def test_before_effect_fires_around_plain_handlers_but_not_ones_that_fire_it_themselves(
    store, jobs
):
    job("plain", registry=jobs)(lambda ctx: None)
    job("effectful", registry=jobs)(fires("before_effect")(lambda ctx: None))
    enqueue(store, "plain")
    enqueue(store, "effectful")
    abort = RecordingAbort(raise_it=False)
    points = Failpoints({"before_effect": 1.0}, abort=abort)
    make_worker(store, jobs, once=True, failpoints=points).run()
    assert abort.count == 1


def test_failpoint_parsing_names_the_variable_and_the_format():
    assert parse("after_claim:0.5, after_ack:1") == {"after_claim": 0.5, "after_ack": 1.0}
    assert parse("") == {}
    for bad in ("after_claim", "nowhere:1.0", "after_ack:2", "after_ack:x"):
        with pytest.raises(FailpointConfigError, match=r"RIVET_FAILPOINT is malformed.*name:"):
            parse(bad)
    with pytest.raises(FailpointConfigError, match="RIVET_FAILPOINT_SEED must be an integer"):
        parse_seed("abc")


def test_a_seed_makes_failpoint_draws_repeatable():
    def draws(seed: int) -> list[bool]:
        points = Failpoints({"after_ack": 0.5}, seed=seed)
        return [points.should_fire("after_ack") for _ in range(40)]

    assert draws(7) == draws(7)
    assert draws(7) != draws(8)


def test_json_logs_carry_the_task_identity(store, jobs):
    job("noop", registry=jobs)(lambda ctx: None)
    task_id = enqueue(store, "noop")
    stream = io.StringIO()
    saved = logging.getLogger("rivet").handlers[:], logging.getLogger("rivet").propagate
    configure("json", stream=stream)
    try:
        make_worker(store, jobs, once=True).run()
    finally:
        logging.getLogger("rivet").handlers, logging.getLogger("rivet").propagate = saved
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    acked = next(line for line in lines if line["event"] == "acked")
    assert {k: acked[k] for k in ("task", "kind", "attempt", "epoch", "owner")} == {
        "task": task_id,
        "kind": "noop",
        "attempt": 1,
        "epoch": 1,
        "owner": "unit:1",
    }
    assert [line["event"] for line in lines if "task" in line] == ["claimed", "acked"]


# -- options ---------------------------------------------------------------------------------


def test_a_flag_beats_its_variable_which_beats_the_setting(settings):
    settings.RIVET = {"CONCURRENCY": 7, "LEASE_TTL_SECS": 9}
    env = {"RIVET_CONCURRENCY": "5", "RIVET_LEASE_TTL_SECS": "3"}
    values = resolve({"concurrency": "2"}, env)
    assert (values["concurrency"], values["lease_ttl"]) == (2, 3.0)
    values = resolve({}, {})
    assert (values["concurrency"], values["lease_ttl"]) == (7, 9.0)


@pytest.mark.parametrize(
    ("flags", "env", "message"),
    [
        ({"concurrency": "0"}, {}, "--concurrency must be an integer from 1 to 1024, got '0'"),
        ({"concurrency": "100000"}, {}, "--concurrency must be an integer from 1 to 1024"),
        ({}, {"RIVET_LEASE_TTL_SECS": "1e9"}, "must be a number of seconds > 0 and <= 86400"),
        ({"pool_size": "5000"}, {}, "--pool-size must be an integer from 2 to 1024, got '5000'"),
        ({"connect_timeout": "0"}, {}, "--connect-timeout-secs must be a number of seconds > 0"),
        ({"max_jobs": "0"}, {}, "--max-jobs must be an integer >= 1"),
        ({}, {"RIVET_LEASE_TTL_SECS": "abc"}, "RIVET_LEASE_TTL_SECS must be a number"),
        ({"pool_size": "1"}, {}, "--pool-size must be an integer from 2 to 1024"),
        ({"queues": "ok,no way"}, {}, "--queue must be queue names"),
        ({}, {"RIVET_LOG_FORMAT": "xml"}, "RIVET_LOG_FORMAT must be text or json"),
    ],
)
def test_a_bad_option_names_where_it_came_from(flags, env, message):
    with pytest.raises(OptionError) as caught:
        resolve(flags, env)
    assert message in str(caught.value)
