"""A real worker process with a retention prunes old done tasks and fenced records as it runs."""

from __future__ import annotations

import signal

import pytest
from django.db import connection

from rivet.models import FencedWrite, Task
from rivet.values import TaskState

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def age_everything(secs: float) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE rivet_task SET updated_at = updated_at - make_interval(secs => %s)", [secs]
        )
        cursor.execute(
            "UPDATE rivet_fenced_write SET created_at = created_at - make_interval(secs => %s)",
            [secs],
        )


def test_a_worker_with_retention_prunes_old_done_tasks_and_keeps_the_rest(workers):
    old = [workers.enqueue("noop") for _ in range(5)]
    first = workers.start("--queue", "demo", "--once")
    assert first.wait() == 0, first.log
    FencedWrite.objects.create(task_id=old[0], queue="demo", op="ack", owner="gone", epoch=0)
    dead = workers.enqueue("fail", max_attempts=1)
    assert workers.start("--queue", "demo", "--once").wait() == 0
    age_everything(7200)
    waiting = workers.enqueue("noop", delay=3600)
    worker = workers.start(
        "--queue", "demo", "--log-format", "json", "--retention", "1h",
        "--prune-every-secs", "0.2", "--prune-batch-size", "2", "--poll-interval", "0.1",
    )  # fmt: skip
    workers.wait_for(lambda: not Task.objects.filter(state=TaskState.DONE).exists(), "the prune")
    fresh = workers.enqueue("noop")
    workers.wait_for(lambda: workers.task(fresh).state == TaskState.DONE, "the fresh task done")
    workers.wait_for(lambda: worker.events("pruned"), "a pruned log line")
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.log
    assert set(Task.objects.values_list("id", flat=True)) == {dead, waiting, fresh}
    assert FencedWrite.objects.count() == 0
    pruned = worker.events("pruned")
    assert sum(e["tasks"] for e in pruned) == 5
    assert sum(e["fenced"] for e in pruned) == 1


def test_a_bad_retention_stops_the_worker_with_exit_2(workers):
    worker = workers.start("--queue", "demo", "--retention", "a while")
    assert worker.wait() == 2
    assert "--retention must be a duration such as 7d" in worker.log
