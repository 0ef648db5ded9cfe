"""A real ``rivet_worker`` process serving queues on two PostgreSQL clusters at once."""

from __future__ import annotations

import signal

import pytest

import rivet
from rivet.models import Task
from rivet.values import TaskState
from tests.acceptance.test_worker_metrics import free_port, sample, scrapable
from tests.two_clusters import SECOND_ALIAS, TWO_DATABASES

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.django_db(databases=["default", SECOND_ALIAS], transaction=True),
]


def states(alias: str) -> list[str]:
    return list(Task.objects.using(alias).order_by("id").values_list("state", flat=True))


def test_one_worker_runs_the_queues_of_both_databases_with_one_set_of_metrics(
    workers, settings, second_database
):
    settings.RIVET = {**settings.RIVET, "QUEUE_DATABASES": TWO_DATABASES}
    for _ in range(3):
        rivet.enqueue("noop", queue="demo")
        rivet.enqueue("noop", queue="mail")
    assert (len(states("default")), len(states(SECOND_ALIAS))) == (3, 3)
    port = free_port()
    env = workers.env(
        DJANGO_SETTINGS_MODULE="tests.settings_two_databases",
        SECOND_DATABASE_URL=second_database.url,
    )
    worker = workers.start(
        "--queue", "demo,mail", "--metrics-port", str(port), "--concurrency", "2",
        "--poll-interval", "0.05", "--log-format", "json", env=env,
    )  # fmt: skip
    workers.wait_for(
        lambda: states("default") == states(SECOND_ALIAS) == [TaskState.DONE] * 3,
        "the tasks of both databases to be done",
    )
    samples = workers.wait_for(lambda: scrapable(port), "the metrics port to answer")
    for queue in ("demo", "mail"):
        assert sample(samples, "rivet_worker_acks_total", queue=queue, kind="noop") == 3.0
    assert sample(samples, "rivet_worker_slots") == 4.0  # two loops of two slots
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.log
    started = worker.events("worker_started")
    assert sorted(event["queues"] for event in started) == ["demo", "mail"], worker.log
    assert len(worker.events("worker_stopped")) == 2
    owners = {
        *Task.objects.using("default").values_list("lease_owner", flat=True),
        *Task.objects.using(SECOND_ALIAS).values_list("lease_owner", flat=True),
    }
    assert len(owners) == 1  # one process, one owner name on both databases
