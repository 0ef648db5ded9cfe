"""Healthy workers as real processes on PostgreSQL: draining, retries, dead letters, queues."""

from __future__ import annotations

from datetime import datetime

import pytest
from django.db import connection

from rivet.models import Task
from rivet.values import HANDLER_ERROR_SUFFIX, TaskState

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def test_once_drains_what_is_runnable_and_exits_0(workers):
    ready = [workers.enqueue("noop") for _ in range(5)]
    later = workers.enqueue("noop", delay=3600)
    worker = workers.start("--queue", "demo", "--once")
    assert worker.wait() == 0, worker.log
    assert [workers.task(t).state for t in ready] == [TaskState.DONE] * 5
    assert (workers.task(later).state, workers.task(later).attempts) == (TaskState.PENDING, 0)


def test_fail_tasks_die_after_exactly_max_attempts_with_the_backoff_between(workers):
    ids = [workers.enqueue("fail", {"n": n}, max_attempts=3) for n in range(2)]
    worker = workers.start(
        "--queue", "demo", "--log-format", "json", "--max-jobs", "6", "--poll-interval", "0.05",
        "--retry-backoff-secs", "0.2", "--retry-backoff-cap-secs", "0.5",
    )  # fmt: skip
    assert worker.wait() == 0, worker.log
    for task_id in ids:
        task = workers.task(task_id)
        assert (task.state, task.attempts) == (TaskState.DEAD, 3)
        assert task.last_error.endswith(HANDLER_ERROR_SUFFIX)
        assert task.last_error.startswith("DemoFailure: the fail kind always fails (attempt 3)")

    for task_id in ids:
        claims = [e for e in worker.events("claimed") if e["task"] == task_id]
        retries = [e for e in worker.events("retry") if e["task"] == task_id]
        assert [e["attempt"] for e in claims] == [1, 2, 3]
        assert [e["attempt"] for e in retries] == [1, 2]
        for retry, ceiling in zip(retries, (0.4, 0.5), strict=True):  # min(cap, 0.2 * 2**n)
            assert 0.0 <= retry["retry_in"] <= ceiling
        for retry, next_claim in zip(retries, claims[1:], strict=True):
            # The claim came no sooner than the wait the failed attempt asked for.
            waited = seconds_between(retry["ts"], next_claim["ts"])
            assert waited >= retry["retry_in"] - 0.05, (retry, next_claim)


def test_a_failed_attempt_waits_for_its_visible_at_before_it_is_claimed_again(workers):
    ids = [workers.enqueue("fail", max_attempts=3) for _ in range(2)]
    worker = workers.start(
        "--queue", "demo", "--once", "--log-format", "json",
        "--retry-backoff-secs", "30", "--retry-backoff-cap-secs", "45",
    )  # fmt: skip
    assert worker.wait() == 0, worker.log  # --once: nothing was runnable any more
    for task_id in ids:
        task = workers.task(task_id)
        claims = [e for e in worker.events("claimed") if e["task"] == task_id]
        retries = [e for e in worker.events("retry") if e["task"] == task_id]
        # Full jitter may draw a wait shorter than the run: then the task was claimed again,
        # but never before its wait was over; the last retry's wait is still ahead of it.
        assert [e["attempt"] for e in claims] == list(range(1, task.attempts + 1))
        assert len(retries) == task.attempts < 3
        for retry, next_claim in zip(retries, claims[1:], strict=False):
            waited = seconds_between(retry["ts"], next_claim["ts"])
            assert waited >= retry["retry_in"] - 0.05, (retry, next_claim)
        assert task.state == TaskState.PENDING
        wait = (task.visible_at - task.updated_at).total_seconds()  # both written by the server
        assert wait == pytest.approx(retries[-1]["retry_in"], abs=0.002)
        assert 0 <= wait <= 45  # min(cap, backoff * 2**attempts)


def seconds_between(earlier: str, later: str) -> float:
    return (datetime.fromisoformat(later) - datetime.fromisoformat(earlier)).total_seconds()


def test_an_unknown_kind_is_never_run_and_dies_naming_the_kind(workers, settings):
    # A producer whose workers run elsewhere may enqueue a kind it does not know.
    settings.RIVET = {**settings.RIVET, "ALLOW_UNKNOWN_KINDS": True}
    task_id = workers.enqueue("billing.nonexistent", {"amount": 1}, max_attempts=2)
    worker = workers.start("--queue", "demo", "--once", "--retry-backoff-secs", "0")
    assert worker.wait() == 0, worker.log
    task = workers.task(task_id)
    assert (task.state, task.attempts, task.result) == (TaskState.DEAD, 2, None)
    assert task.last_error.startswith("UnknownJob: unknown job kind 'billing.nonexistent'")
    assert task.last_error.endswith(HANDLER_ERROR_SUFFIX)


def test_queues_are_tried_in_the_order_given(workers):
    low = [workers.enqueue("noop", queue="low") for _ in range(3)]
    high = [workers.enqueue("noop", queue="high") for _ in range(3)]
    worker = workers.start(
        "--queue", "high,low", "--concurrency", "1", "--once", "--log-format", "json"
    )
    assert worker.wait() == 0, worker.log
    # The order the worker claimed and acked them in (its log): acks written by one flush share
    # their updated_at, so the rows cannot tell it.
    for event in ("claimed", "acked"):
        assert [line["task"] for line in worker.events(event)] == high + low, worker.log
    assert set(Task.objects.values_list("state", flat=True)) == {TaskState.DONE}


def test_three_workers_share_a_queue_and_no_task_is_claimed_twice(workers):
    ids = [workers.enqueue("sleep", {"ms": 20}) for _ in range(40)]
    pool = [
        workers.start("--queue", "demo", "--once", "--concurrency", "4", "--owner", f"w{n}")
        for n in range(3)
    ]
    assert [w.wait() for w in pool] == [0, 0, 0], [w.log for w in pool]
    rows = Task.objects.filter(pk__in=ids)
    assert {(t.state, t.attempts, t.lease_epoch) for t in rows} == {(TaskState.DONE, 1, 1)}


def test_an_idle_worker_wakes_on_enqueue_rather_than_on_its_poll(workers):
    worker = workers.start("--queue", "demo", "--poll-interval", "120")
    workers.wait_for(listening_on_the_queue_channel, "the worker's LISTEN connection")
    task_id = workers.enqueue("noop")
    workers.wait_for(lambda: workers.task(task_id).state == TaskState.DONE, "the task", limit=20)
    assert worker.running


def listening_on_the_queue_channel() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND query ILIKE 'LISTEN%%'"
        )
        return cursor.fetchone()[0] > 0


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--concurrency", "0"], {}, "--concurrency must be an integer from 1 to 1024, got '0'"),
        ([], {"RIVET_LEASE_TTL_SECS": "abc"}, "RIVET_LEASE_TTL_SECS must be a number"),
        ([], {"RIVET_FAILPOINT": "after_ack"}, "RIVET_FAILPOINT is malformed"),
    ],
)
def test_a_bad_option_exits_2_naming_it(workers, args, env, message):
    worker = workers.start("--queue", "demo", *args, env=workers.env(**env))
    assert worker.wait() == 2
    assert message in worker.log
