"""A Django @task enqueued through TASKS = RivetBackend runs on a real rivet_worker process."""

from __future__ import annotations

import pytest

from chaos_project.tasks import add
from rivet.backends import TaskResultStatus

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def test_a_django_task_runs_on_a_worker_process_and_its_result_comes_back(workers):
    result = add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY

    worker = workers.start("--queue", "default", "--once")
    assert worker.wait() == 0, worker.log

    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
