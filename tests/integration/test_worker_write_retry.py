"""A settle write that fails because PostgreSQL dropped the connection is retried in the lease.

The handler terminates every other server connection of the test database (the worker loop's
among them) with pg_terminate_backend, then returns. The ack that follows meets a dead
connection, a real driver OperationalError; the worker reconnects and writes it again while its
lease still holds, instead of leaving the task to lapse and run a second time.
"""

from __future__ import annotations

import logging

import pytest
from django.db import connection

from rivet.failpoints import Failpoints
from rivet.jobs import JobContext, JobRegistry, job
from rivet.logs import EVENT_ATTR
from rivet.stores import store_for_alias
from rivet.validation import build_spec
from rivet.worker import Worker, WorkerConfig

pytestmark = pytest.mark.django_db(transaction=True)

TERMINATE_OTHERS = """
SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
  AND backend_type = 'client backend'
"""


class Events(logging.Handler):
    """Collects the rivet event names logged while it is attached."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.names: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.names.append(getattr(record, EVENT_ATTR, ""))


def test_an_ack_whose_connection_was_killed_is_retried_not_lost() -> None:
    jobs = JobRegistry()
    killed: list[int] = []

    @job("kill.connections", registry=jobs)
    def kill_connections(ctx: JobContext) -> str:
        with connection.cursor() as cursor:  # this handler thread's own connection
            cursor.execute(TERMINATE_OTHERS)
            killed.append(cursor.fetchone()[0])
        return "acked after the outage"

    store = store_for_alias("default")
    task_id = store.task_enqueue(build_spec(queue="outage", kind="kill.connections")).task_id
    connection.close()  # the loop runs on this thread: make it hold a fresh connection
    config = WorkerConfig(
        queues=("outage",),
        owner="outage:1",
        lease_ttl=30.0,
        concurrency=1,
        retry_backoff=0.0,
        retry_backoff_cap=0.0,
        poll_interval=0.05,
        once=True,
    )
    worker = Worker(config, store=store, registry=jobs, failpoints=Failpoints())
    events, worker_log = Events(), logging.getLogger("rivet.worker")
    worker_log.addHandler(events)
    try:
        stats = worker.run()
    finally:
        worker_log.removeHandler(events)
    connection.close()
    assert killed and killed[0] >= 1, "no connection was terminated"
    assert "write_retry" in events.names, f"the ack met no dropped connection: {events.names}"
    assert "write_failed" not in events.names
    assert (stats.acked, stats.lost) == (1, 0)
    task = store.task_get(task_id)
    assert (task.state, task.attempts, task.result) == ("done", 1, "acked after the outage")
