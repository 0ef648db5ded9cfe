"""rivet.backends.RivetBackend: Django @task functions enqueued on rivet and run by a worker."""

import importlib
import pickle
from datetime import datetime, timedelta

import django
import pytest
from asgiref.sync import async_to_sync
from django.db.models.functions import Now
from django.utils import timezone

import rivet
import rivet.testing
from rivet.backends import (
    DJANGO_TASK_KIND,
    InvalidTask,
    RivetBackend,
    TaskResultDoesNotExist,
    TaskResultMismatch,
    TaskResultStatus,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from rivet.errors import RivetConfigError, RivetError
from rivet.models import Task
from rivet.retry import RetryPolicy
from rivet.stores import store_for_alias
from rivet.worker import Worker, WorkerConfig

pytestmark = pytest.mark.django_db(transaction=True)


def rivet_tasks(**options):
    return {
        "default": {
            "BACKEND": "rivet.backends.RivetBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": options,
        }
    }


@pytest.fixture
def tasks(settings):
    settings.TASKS = rivet_tasks(max_attempts=2)
    return importlib.import_module("tests.tasks_for_backend")


# A failed attempt is retried an hour later, so one drain runs each task at most once.
HOUR_LATER = RetryPolicy(backoff_secs=3600, cap_secs=3600, uniform=lambda low, high: high)


def run_worker(*queues: str) -> None:
    """Drain the queues with a real rivet worker, in this process, then return."""
    store = store_for_alias("default")
    worker = Worker(
        WorkerConfig(queues=tuple(queues), once=True, lease_ttl=30, concurrency=2),
        store=store,
        retry_policy=HOUR_LATER,
    )
    stats = worker.run()
    assert stats.exit_code == 0


def row(result):
    return Task.objects.get(pk=int(result.id))


def test_the_backend_declares_what_it_supports(tasks):
    backend = task_backends["default"]
    assert isinstance(backend, RivetBackend)
    assert backend.supports_defer and backend.supports_get_result
    assert backend.supports_priority and backend.supports_async_task


def test_enqueue_stores_one_rivet_task_naming_the_function(tasks):
    result = tasks.shout.enqueue("hi")
    task = row(result)
    assert (task.kind, task.queue, task.priority, task.state) == (
        DJANGO_TASK_KIND,
        "emails",
        10,
        "pending",
    )
    assert task.payload == {
        "func": "tests.tasks_for_backend.shout",
        "args": ["hi"],
        "kwargs": {},
        "backend": "default",
    }
    assert task.max_attempts == 2
    assert result.status == TaskResultStatus.READY
    assert (result.args, result.kwargs, result.backend) == (["hi"], {}, "default")
    assert result.enqueued_at == task.created_at
    assert not result.is_finished and result.attempts == 0 and result.errors == []


def test_using_changes_queue_and_priority(tasks):
    result = tasks.add.using(queue_name="emails", priority=-5).enqueue(1, 2)
    assert (row(result).queue, row(result).priority) == ("emails", -5)


def test_run_after_makes_the_task_visible_then(tasks):
    when = timezone.now() + timedelta(hours=1)
    result = tasks.add.using(run_after=when).enqueue(1, 2)
    assert row(result).visible_at == when
    run_worker("default")
    assert tasks.add.get_result(result.id).status == TaskResultStatus.READY


def test_a_task_runs_on_a_worker_and_its_return_value_comes_back(tasks):
    result = tasks.add.enqueue(2, b=3)
    run_worker("default")
    fetched = tasks.add.get_result(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL
    assert fetched.return_value == 5
    assert fetched.attempts == 1 and fetched.finished_at is not None
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 5
    assert row(result).result == 5


def test_each_queue_runs_on_a_worker_of_that_queue(tasks):
    result = tasks.shout.enqueue("hello")
    run_worker("default")
    assert tasks.shout.get_result(result.id).status == TaskResultStatus.READY
    run_worker("emails")
    assert tasks.shout.get_result(result.id).return_value == {"shouted": "HELLO"}


def test_a_task_that_raises_is_failed_once_its_attempts_are_used_up(tasks):
    result = tasks.explode.enqueue("kaboom")
    run_worker("default")
    first = tasks.explode.get_result(result.id)
    assert first.status == TaskResultStatus.READY and first.attempts == 1
    assert first.errors[0].exception_class is ValueError
    # The retry is due in an hour; make it due now, by the database's clock.
    Task.objects.filter(pk=int(result.id)).update(visible_at=Now())
    run_worker("default")
    failed = tasks.explode.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED
    assert failed.attempts == 2
    assert [error.exception_class for error in failed.errors] == [ValueError, ValueError]
    assert all("kaboom" in error.traceback for error in failed.errors)
    assert failed.errors[0].traceback == first.errors[0].traceback  # the first attempt's, kept
    with pytest.raises(ValueError, match="Task failed"):
        failed.return_value  # noqa: B018


def test_a_context_task_sees_its_attempt_and_id(tasks):
    result = tasks.which_attempt.enqueue("ctx")
    run_worker("default")
    assert tasks.which_attempt.get_result(result.id).return_value == {
        "label": "ctx",
        "attempt": 1,
        "id": result.id,
    }


def test_an_async_task_runs(tasks):
    result = tasks.double_async.enqueue(21)
    run_worker("default")
    assert tasks.double_async.get_result(result.id).return_value == 42


def test_a_return_value_that_is_not_json_fails_the_attempt(tasks):
    result = tasks.returns_a_set.enqueue()
    run_worker("default")
    task = row(result)
    assert task.state != "done"
    assert "not JSON" in task.last_error


def test_get_result_of_a_leased_task_is_running(tasks):
    result = tasks.add.enqueue(1, 1)
    store = store_for_alias("default")
    store.task_claim(queues=["default"], owner="worker-7", limit=1, lease_ttl=600)
    running = tasks.add.get_result(result.id)
    assert running.status == TaskResultStatus.RUNNING
    assert running.worker_ids == ["worker-7"] and running.started_at is not None


@pytest.mark.parametrize("result_id", ["999999", "not-a-number", ""])
def test_get_result_of_an_unknown_id_does_not_exist(tasks, result_id):
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(result_id)


def test_get_result_refuses_a_task_that_is_not_a_django_task(tasks):
    plain = rivet.enqueue("noop", using="default")
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(str(plain.task_id))


def test_a_queue_the_backend_does_not_list_is_refused(tasks):
    with pytest.raises(InvalidTask, match="nowhere"):
        tasks.add.using(queue_name="nowhere")


def test_a_queue_name_rivet_cannot_store_is_refused(settings):
    settings.TASKS = {"default": {"BACKEND": "rivet.backends.RivetBackend", "QUEUES": []}}
    tasks = importlib.import_module("tests.tasks_for_backend")
    with pytest.raises(InvalidTask, match="queue"):
        tasks.add.using(queue_name="has spaces")


def test_unknown_options_are_refused_by_name(settings):
    settings.TASKS = rivet_tasks(databse="default")
    with pytest.raises(RivetConfigError, match="databse"):
        task_backends["default"]  # noqa: B018


def test_the_database_option_picks_the_store(settings):
    settings.TASKS = rivet_tasks(database="sqlite")
    assert task_backends["default"].database == "sqlite"


def test_under_the_testing_fake_the_enqueue_is_recorded(tasks):
    with rivet.testing.fake() as queue:
        result = tasks.add.enqueue(4, 5)
        assert tasks.add.get_result(result.id).status == TaskResultStatus.READY
    (recorded,) = queue.assert_enqueued(DJANGO_TASK_KIND, times=1, queue="default")
    assert recorded.payload["args"] == [4, 5]
    assert not Task.objects.exists()


def test_the_job_runs_without_a_worker_through_run_now(tasks):
    payload = {"func": "tests.tasks_for_backend.add", "args": [5, 6], "kwargs": {}}
    assert rivet.testing.run_now(DJANGO_TASK_KIND, payload) == 11


def test_a_payload_naming_something_that_is_not_a_task_fails(tasks):
    payload = {"func": "tests.tasks_for_backend.not_a_task", "args": [], "kwargs": {}}
    with pytest.raises(RivetError, match="not a Django Task"):
        rivet.testing.run_now(DJANGO_TASK_KIND, payload)


def test_aenqueue_and_aget_result_go_through_the_same_backend(tasks):
    result = async_to_sync(tasks.add.aenqueue)(20, 22)
    assert row(result).payload["args"] == [20, 22]
    run_worker("default")
    fetched = async_to_sync(tasks.add.aget_result)(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL and fetched.return_value == 42
    async_to_sync(result.arefresh)()
    assert result.return_value == 42


def test_aenqueue_and_aget_result_use_rivets_async_api_not_the_sync_methods(tasks, monkeypatch):
    def refused(*args, **kwargs):
        raise AssertionError("the sync path was taken")

    awaited = []
    real_aenqueue, real_aget_task = rivet.backends.aenqueue, rivet.backends.aget_task

    async def aenqueue(*args, **kwargs):
        awaited.append("aenqueue")
        return await real_aenqueue(*args, **kwargs)

    async def aget_task(*args, **kwargs):
        awaited.append("aget_task")
        return await real_aget_task(*args, **kwargs)

    monkeypatch.setattr(rivet.backends, "enqueue", refused)
    monkeypatch.setattr(RivetBackend, "get_result", refused)
    monkeypatch.setattr(rivet.backends, "aenqueue", aenqueue)
    monkeypatch.setattr(rivet.backends, "aget_task", aget_task)
    result = async_to_sync(tasks.add.aenqueue)(1, 2)
    assert result.status == TaskResultStatus.READY
    assert row(result).payload["args"] == [1, 2]
    assert async_to_sync(tasks.add.aget_result)(result.id).id == result.id
    with pytest.raises(TaskResultDoesNotExist):
        async_to_sync(tasks.add.aget_result)("not-a-number")
    assert awaited == ["aenqueue", "aget_task", "aget_task"]


def test_get_result_through_another_task_is_a_mismatch(tasks):
    result = tasks.shout.enqueue("mine")
    with pytest.raises(TaskResultMismatch, match="tests.tasks_for_backend.shout"):
        tasks.add.get_result(result.id)


@pytest.mark.parametrize("priority", [101, -101])
def test_a_priority_outside_the_api_range_is_refused(tasks, priority):
    with pytest.raises(InvalidTask, match="priority"):
        tasks.add.using(priority=priority)


def test_a_naive_run_after_is_refused(tasks):
    with pytest.raises(InvalidTask, match="aware"):
        tasks.add.using(run_after=datetime(2030, 1, 1))


class Signals:
    """Every task_enqueued / task_started / task_finished sent while connected."""

    def __init__(self):
        self.sent = []

    def __call__(self, signal, sender, task_result, **kwargs):
        self.sent.append((signal, sender, task_result.status, list(task_result.errors)))

    def named(self):
        names = {task_enqueued: "enqueued", task_started: "started", task_finished: "finished"}
        return [(names[signal], sender, status) for signal, sender, status, _ in self.sent]


@pytest.fixture
def signals():
    received = Signals()
    for signal in (task_enqueued, task_started, task_finished):
        signal.connect(received, weak=False, dispatch_uid=f"test-{id(signal)}")
    yield received
    for signal in (task_enqueued, task_started, task_finished):
        signal.disconnect(dispatch_uid=f"test-{id(signal)}")


def test_the_tasks_signals_follow_a_task_from_enqueue_to_success(tasks, signals):
    tasks.add.enqueue(1, 2)
    run_worker("default")
    assert signals.named() == [
        ("enqueued", RivetBackend, TaskResultStatus.READY),
        ("started", RivetBackend, TaskResultStatus.RUNNING),
        ("finished", RivetBackend, TaskResultStatus.SUCCESSFUL),
    ]


def test_task_finished_for_a_failure_comes_after_the_last_attempt_with_its_error(tasks, signals):
    result = tasks.explode.enqueue("boom")
    run_worker("default")
    assert [name for name, _, _ in signals.named()] == ["enqueued", "started"]
    Task.objects.filter(pk=int(result.id)).update(visible_at=Now())
    run_worker("default")
    assert signals.named()[-1] == ("finished", RivetBackend, TaskResultStatus.FAILED)
    (error,) = signals.sent[-1][3]
    assert error.exception_class is ValueError and "boom" in error.traceback


@pytest.mark.skipif(
    django.VERSION < (6, 1),
    reason=f"Django 6.1 made results picklable; this cell has Django {django.get_version()}",
)
def test_on_django_61_a_result_pickles(tasks):
    result = tasks.add.enqueue(3, 4)
    run_worker("default")
    finished = tasks.add.get_result(result.id)
    copy = pickle.loads(pickle.dumps(finished))
    assert (copy.id, copy.status, copy.return_value) == (result.id, finished.status, 7)
    assert copy.task.func is tasks.add.func
