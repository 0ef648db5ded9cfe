"""The task table's own rules, enforced by PostgreSQL whatever code writes to it."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from rivet.models import DeadLetter, FencedWrite, Task
from rivet.stores.postgres import PostgresStore
from tests.factories import FencedWriteFactory, TaskFactory

pytestmark = pytest.mark.django_db


def test_a_state_outside_the_three_is_refused_by_the_database():
    with pytest.raises(IntegrityError, match="rivet_task_state_valid"), transaction.atomic():
        TaskFactory(state="claimed")


def test_max_attempts_below_one_is_refused_by_the_database():
    with pytest.raises(IntegrityError, match="rivet_task_max_attempts"), transaction.atomic():
        TaskFactory(max_attempts=0)


def test_two_pending_tasks_of_one_unique_job_are_refused_by_the_database():
    TaskFactory(kind="search.rebuild", unique_key="")
    with pytest.raises(IntegrityError, match="rivet_task_unique_pending"), transaction.atomic():
        TaskFactory(kind="search.rebuild", unique_key="")


def test_the_unique_job_lock_frees_once_the_task_is_done():
    TaskFactory(kind="search.rebuild", unique_key="", done=True)
    assert TaskFactory(kind="search.rebuild", unique_key="").state == "pending"


def test_one_idempotency_key_names_one_task():
    TaskFactory(idem_key="pay-1")
    with pytest.raises(IntegrityError), transaction.atomic():
        TaskFactory(idem_key="pay-1")


def test_timestamps_come_from_the_database_default():
    task = TaskFactory()
    task.refresh_from_db()
    assert task.created_at == task.updated_at == task.visible_at


def test_the_dead_letter_queue_is_the_dead_tasks_only():
    dead = TaskFactory(dead=True)
    TaskFactory()
    TaskFactory(done=True)
    assert list(DeadLetter.objects.values_list("id", flat=True)) == [dead.id]
    assert str(dead) == f"noop#{dead.id} (dead)"


def test_fenced_writes_are_counted_by_the_store_per_queue():
    FencedWriteFactory(task=TaskFactory(queue="a"))
    FencedWriteFactory(task=TaskFactory(queue="a"), op=FencedWrite.Op.FAIL)
    FencedWriteFactory(task=TaskFactory(queue="b"))
    store = PostgresStore()
    assert store.fenced_count("a") == 2
    assert store.fenced_count("a", op="fail") == 1
    assert store.fenced_count() == 3
    assert Task.objects.count() == 3
