"""A Django @task enqueued through TASKS = RivetBackend runs on a real rivet_worker process."""

from __future__ import annotations

import time
import uuid

import pytest
from django.db import connection

from chaos_project.tasks import add, count_tasks_slowly, session_settings
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


def backends_of(application_name: str) -> int:
    """Live client connections that name themselves ``application_name`` (one worker's: libpq
    reads PGAPPNAME from its environment), not another process's, nor one already closing."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
            "AND backend_type = 'client backend' AND pid <> pg_backend_pid()",
            [application_name],
        )
        return cursor.fetchone()[0]


@pytest.mark.parametrize("pool_size", [3, 8])
def test_pool_size_bounds_the_connections_a_worker_holds(workers, pool_size):
    results = [count_tasks_slowly.enqueue(400) for _ in range(6)]
    name = f"rivet-pool-test-{uuid.uuid4().hex[:12]}"
    worker = workers.start(
        *("--queue", "default", "--concurrency", "6", "--pool-size", str(pool_size)),
        env=workers.env(PGAPPNAME=name),
    )
    peak = 0
    for result in results:
        while True:
            peak = max(peak, backends_of(name))
            result.refresh()
            if result.status == TaskResultStatus.SUCCESSFUL:
                break
            assert worker.running, worker.log
    # The pool, plus the store's LISTEN connection, which is outside it.
    assert peak <= pool_size + 1, f"{peak} connections with --pool-size {pool_size}"
    if pool_size == 8:
        assert peak > 3 + 1, "six handlers at once should need more than the small pool"


def test_handlers_get_connections_with_the_servers_planner_settings(workers):
    """The loop's connection carries the worker's session settings (generic plans, sorting and
    sequential scans off) for rivet's own flush; when it goes back to the pool, a handler may
    get it next, and a user's queries must not run with them."""
    worker = workers.start("--queue", "default", "--concurrency", "1", "--pool-size", "3")
    seen = []
    for _ in range(12):  # one at a time: the worker goes idle between them
        result = session_settings.enqueue()
        while result.status != TaskResultStatus.SUCCESSFUL:
            assert result.status != TaskResultStatus.FAILED and worker.running, worker.log
            time.sleep(0.02)
            result.refresh()
        seen.append(result.return_value)
    settings = {(s["enable_sort"], s["enable_seqscan"], s["plan_cache_mode"]) for s in seen}
    assert settings == {("on", "on", "auto")}, seen
