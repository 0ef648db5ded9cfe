"""After an asynchronous failover an id can name another task; the key tells them apart.

The new primary starts from the standby's copy: a task whose enqueue reached only the old
primary is not there, and the id sequence is where the standby last saw it, behind the old
primary's. Here that state is made on a real PostgreSQL database as the new primary has it: the
task's row is gone and the sequence is set back, so the next enqueue gets the same id.
"""

from __future__ import annotations

import pytest
from django.db import connection

import rivet
from rivet.values import CancelOutcome

pytestmark = pytest.mark.django_db(transaction=True)


def as_after_an_async_failover(task_id: int) -> None:
    """The task's row and the sequence as a new primary that never saw the task has them."""
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM rivet_task WHERE id = %s", [task_id])
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence('rivet_task', 'id'), %s, false)", [task_id]
        )


def test_an_id_handed_out_again_is_not_taken_for_the_first_task_when_read_with_its_key():
    if connection.vendor != "postgresql":
        pytest.fail("this test sets a PostgreSQL sequence back: run it with DATABASE_URL set")
    first = rivet.enqueue("noop", {"order": 7}, queue="reuse", idem_key="order-7")
    as_after_an_async_failover(first.task_id)
    second = rivet.enqueue("noop", {"order": 8}, queue="reuse", idem_key="order-8")
    assert second.task_id == first.task_id  # the id now names another task

    assert rivet.get_task(first.task_id).payload == {"order": 8}  # by id alone: the wrong one
    assert rivet.get_task(first.task_id, idem_key="order-7") is None
    assert rivet.cancel(first.task_id, idem_key="order-7") is CancelOutcome.NOT_FOUND
    assert rivet.get_task(second.task_id, idem_key="order-8").state == "pending"  # untouched
