"""Workers that die, stall, abort or are told to stop, as real processes on PostgreSQL.

Leases are 1 second so a lost worker's task comes back quickly; nothing here asserts on how
long anything took.
"""

from __future__ import annotations

import signal

import pytest

from rivet.models import FencedWrite
from rivet.values import TaskState

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

FAST = ("--lease-ttl-secs", "1", "--poll-interval", "0.1")


def claimed_by(workers, task_id: int, owner: str):
    return lambda: workers.task(task_id).lease_owner == owner


def test_a_sigkilled_worker_s_task_is_delivered_again_with_a_higher_epoch(workers):
    task_id = workers.enqueue("sleep", {"ms": 1500})
    first = workers.start("--queue", "demo", "--owner", "first", *FAST)
    workers.wait_for(claimed_by(workers, task_id, "first"), "the first worker's claim")
    first.send(signal.SIGKILL)
    assert first.wait() == -signal.SIGKILL

    second = workers.start("--queue", "demo", "--owner", "second", "--max-jobs", "1", *FAST)
    assert second.wait() == 0, second.log
    task = workers.task(task_id)
    assert (task.state, task.lease_owner) == (TaskState.DONE, "second")
    assert (task.attempts, task.lease_epoch) == (2, 2)
    assert task.result == {"slept_ms": 1500}


def test_a_worker_stopped_past_its_lease_is_fenced_and_the_fence_is_recorded(workers):
    task_id = workers.enqueue("sleep", {"ms": 1500})
    stalled = workers.start(
        "--queue", "demo", "--owner", "stalled", "--concurrency", "1", "--log-format", "json", *FAST
    )  # fmt: skip
    workers.wait_for(claimed_by(workers, task_id, "stalled"), "the stalled worker's claim")
    stalled.send(signal.SIGSTOP)
    try:
        other = workers.start("--queue", "demo", "--owner", "other", "--max-jobs", "1", *FAST)
        assert other.wait() == 0, other.log
    finally:
        stalled.send(signal.SIGCONT)
    fence = workers.wait_for(
        lambda: FencedWrite.objects.filter(task_id=task_id).first(), "the recorded fence"
    )
    stalled.send(signal.SIGTERM)
    assert stalled.wait() == 0, stalled.log

    assert (fence.owner, fence.epoch) == ("stalled", 1)
    task = workers.task(task_id)
    assert (task.state, task.lease_owner, task.lease_epoch) == (TaskState.DONE, "other", 2)
    # Two refused writes, both the stalled worker's at epoch 1: its heartbeat (the store records
    # the first one another claim refused, op "beat") and the end of its attempt it then wrote.
    records = list(FencedWrite.objects.values_list("op", "owner", "epoch"))
    assert len(records) == 2 and ("beat", "stalled", 1) in records, records
    assert {(owner, epoch) for _, owner, epoch in records} == {("stalled", 1)}
    assert [e["task"] for e in stalled.events("fenced")] == [task_id]
    assert stalled.events("acked") == []


def test_sigterm_lets_in_flight_tasks_finish_claims_nothing_more_and_exits_0(workers):
    running = [workers.enqueue("sleep", {"ms": 800}) for _ in range(3)]
    waiting = workers.enqueue("noop")  # concurrency 3: no slot for it before the signal
    worker = workers.start("--queue", "demo", "--concurrency", "3", "--lease-ttl-secs", "2")
    workers.wait_for(
        lambda: all(workers.task(t).attempts == 1 for t in running), "three claimed tasks"
    )
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.log
    assert [workers.task(t).state for t in running] == [TaskState.DONE] * 3
    assert workers.task(waiting).attempts == 0


def test_a_second_signal_exits_at_once_without_acking(workers):
    task_id = workers.enqueue("sleep", {"ms": 20_000})
    worker = workers.start("--queue", "demo", "--shutdown-timeout", "60", *FAST)
    workers.wait_for(lambda: workers.task(task_id).attempts == 1, "the claim")
    worker.send(signal.SIGTERM)
    workers.wait_for(lambda: "worker_signal" in worker.log, "the first signal to be handled")
    worker.send(signal.SIGINT)
    assert worker.wait() == 128 + signal.SIGINT
    assert workers.task(task_id).state == TaskState.PENDING


@pytest.mark.parametrize(
    ("point", "state_after_abort"),
    [
        ("after_claim", TaskState.PENDING),
        ("after_effect_before_ack", TaskState.PENDING),
        ("after_ack", TaskState.DONE),
    ],
)
def test_a_failpoint_aborts_the_worker_at_its_point(workers, point, state_after_abort):
    task_id = workers.enqueue("noop")
    env = workers.env(RIVET_FAILPOINT=f"{point}:1.0")
    worker = workers.start("--queue", "demo", *FAST, env=env)
    assert worker.wait() == -signal.SIGABRT, worker.log
    assert f"failpoint_fired point={point} then=SIGABRT" in worker.log
    task = workers.task(task_id)
    assert (task.state, task.attempts) == (state_after_abort, 1)


def test_after_a_failpoint_abort_the_next_worker_completes_the_task_on_attempt_2(workers):
    task_id = workers.enqueue("sleep", {"ms": 10})
    env = workers.env(RIVET_FAILPOINT="after_effect_before_ack:1.0")
    aborted = workers.start("--queue", "demo", *FAST, env=env)
    assert aborted.wait() == -signal.SIGABRT
    assert workers.task(task_id).state == TaskState.PENDING

    healthy = workers.start("--queue", "demo", "--max-jobs", "1", *FAST)
    assert healthy.wait() == 0, healthy.log
    task = workers.task(task_id)
    assert (task.state, task.attempts, task.lease_epoch) == (TaskState.DONE, 2, 2)
