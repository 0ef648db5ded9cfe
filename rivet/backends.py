"""A django.tasks backend that runs Django ``@task`` functions on rivet.

::

    TASKS = {"default": {"BACKEND": "rivet.backends.RivetBackend", "QUEUES": ["default"]}}

An enqueue stores one rivet task of kind ``rivet.django_task`` whose payload names the function
(its module path) and holds its JSON arguments, on the Task's queue, with its priority, visible
at its ``run_after``. A rivet worker runs it through the job registered below, which imports the
function and calls it; the return value becomes the task's result. ``get_result`` reads the
task row back. The worker process must import this module so the kind is registered.

OPTIONS: ``database`` (a Django alias for the store; default: the database that holds the
Task's queue, ``rivet.routing.alias_for_queue``) and ``max_attempts`` (default:
RIVET['MAX_ATTEMPTS']). A handler error is retried like any rivet task; the Task is FAILED only
once its attempts are used up.

Result ids: the task's id (``"42"``) when it lives on the backend's own database (``database``,
else RIVET['DATABASE_ALIAS']); ``"42@mail_db"`` when its queue lives on another alias, since
each database numbers its tasks by itself.
"""

from __future__ import annotations

import json
import re
import traceback
from dataclasses import fields
from typing import Any

import django
from django.utils import timezone
from django.utils.connection import ConnectionDoesNotExist
from django.utils.module_loading import import_string

from rivet.conf import rivet_settings
from rivet.errors import (
    DjangoTaskAbandoned,
    DjangoTaskFailed,
    InvalidInput,
    RivetConfigError,
    RivetError,
)
from rivet.jobs import JobContext, job
from rivet.producer import aenqueue, aget_task, enqueue, resolve_store
from rivet.routing import alias_for_queue
from rivet.validation import check_name
from rivet.values import TaskRecord

if django.VERSION >= (6, 0):
    from django.tasks import task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
    from django.tasks.signals import task_enqueued, task_finished, task_started
else:  # Django 5.2: the django-tasks backport, which names one exception differently
    try:
        from django_tasks import task_backends  # type: ignore[assignment]
    except ModuleNotFoundError as exc:
        if exc.name != "django_tasks":
            raise
        raise RivetConfigError(
            "rivet.backends.RivetBackend needs Django's Tasks API, and Django "
            f"{django.get_version()} has none: it came with Django 6.0. Install the "
            "django-tasks backport (pip install 'django-tasks>=0.12'; django-rivet installs it "
            "by itself only on Python 3.11), or upgrade to Django 6."
        ) from exc
    # The backport's classes stand in for django.tasks' (the type checker sees Django's).
    from django_tasks.backends.base import BaseTaskBackend  # type: ignore[assignment]
    from django_tasks.base import (  # type: ignore[assignment]
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
    from django_tasks.exceptions import InvalidTaskError as InvalidTask  # type: ignore[assignment]
    from django_tasks.exceptions import (  # type: ignore[assignment]
        TaskResultDoesNotExist,
        TaskResultMismatch,
    )
    from django_tasks.signals import task_enqueued, task_finished, task_started

__all__ = [
    "DJANGO_TASK_KIND",
    "InvalidTask",
    "RivetBackend",
    "TaskResultDoesNotExist",
    "TaskResultMismatch",
    "TaskResultStatus",
    "task_backends",
    "task_result",
]

DJANGO_TASK_KIND = "rivet.django_task"
OPTION_KEYS = frozenset({"database", "max_attempts"})
_RAISED = "django task raised"
_RAISED_RE = re.compile(re.escape(_RAISED) + r" ([A-Za-z_][\w.]*)")
_RESULT_FIELDS = {f.name for f in fields(TaskResult) if f.init}


class RivetBackend(BaseTaskBackend):
    """Django's Tasks API over a rivet queue."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict) -> None:
        super().__init__(alias, params)
        unknown = sorted(set(self.options) - OPTION_KEYS)
        if unknown:
            raise RivetConfigError(
                f"TASKS[{alias!r}]['OPTIONS'] has unknown keys {', '.join(unknown)}; "
                f"RivetBackend knows {', '.join(sorted(OPTION_KEYS))}"
            )
        self.database: str | None = self.options.get("database")
        self.max_attempts: int | None = self.options.get("max_attempts")

    def validate_task(self, task: Task) -> None:
        super().validate_task(task)
        try:
            check_name("queue", task.queue_name)
        except InvalidInput as exc:
            raise InvalidTask(str(exc)) from exc

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        payload = self._payload(task, args, kwargs)
        enqueued = enqueue(DJANGO_TASK_KIND, payload, **self._options(task))
        alias = self.database or alias_for_queue(task.queue_name)
        result = self.get_result(self.result_id(enqueued.task_id, alias))
        task_enqueued.send(type(self), task_result=result)
        return result

    async def aenqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """``enqueue`` through ``rivet.aenqueue`` (see ``rivet.producer``)."""
        self.validate_task(task)
        payload = self._payload(task, args, kwargs)
        enqueued = await aenqueue(DJANGO_TASK_KIND, payload, **self._options(task))
        alias = self.database or alias_for_queue(task.queue_name)
        result = await self.aget_result(self.result_id(enqueued.task_id, alias))
        await task_enqueued.asend(type(self), task_result=result)
        return result

    def _payload(self, task: Task, args: Any, kwargs: Any) -> dict[str, Any]:
        return {
            "func": task.module_path,
            "args": list(args),
            "kwargs": dict(kwargs),
            "backend": self.alias,
        }

    def _options(self, task: Task) -> dict[str, Any]:
        return {
            "queue": task.queue_name,
            "priority": task.priority,
            "run_at": task.run_after,
            "max_attempts": self.max_attempts,
            "using": self.database,
        }

    def get_result(self, result_id: str) -> TaskResult:
        """The task's result now: READY, RUNNING (leased), SUCCESSFUL (done) or FAILED (dead)."""
        number, _, alias = str(result_id).partition("@")
        try:
            store = resolve_store(alias or self.database)
            record = store.task_get(int(number))
        except (TypeError, ValueError, ConnectionDoesNotExist):
            record = None
        return self._result(record, result_id)

    async def aget_result(self, result_id: str) -> TaskResult:
        """``get_result`` through ``rivet.aget_task`` (see ``rivet.producer``)."""
        number, _, alias = str(result_id).partition("@")
        try:
            record = await aget_task(int(number), using=alias or self.database)
        except (TypeError, ValueError, ConnectionDoesNotExist):
            record = None
        return self._result(record, result_id)

    def _result(self, record: TaskRecord | None, result_id: str) -> TaskResult:
        if record is None or record.kind != DJANGO_TASK_KIND:
            raise TaskResultDoesNotExist(result_id)
        return task_result(record, backend=self.alias, result_id=str(result_id))

    def result_id(self, task_id: int, alias: str) -> str:
        """``"42"`` on the backend's own database, ``"42@alias"`` on another."""
        home = self.database or rivet_settings.DATABASE_ALIAS
        return str(task_id) if alias == home else f"{task_id}@{alias}"


def task_result(record: TaskRecord, *, backend: str, result_id: str | None = None) -> TaskResult:
    """A TaskResult from a task row.

    rivet keeps only the current lease owner, so ``worker_ids`` repeats it once per attempt
    (its length is the attempt count). ``errors`` is the task's errors list: every failed
    attempt of its whole life, the newest RIVET['MAX_ERRORS_KEPT'].
    """
    status = _status(record)
    attempted = record.updated_at if record.attempts else None
    finished = record.updated_at if status in _FINISHED else None
    result = _build_result(
        task=_load_task(record.payload["func"]).using(
            queue_name=record.queue, priority=record.priority
        ),
        id=result_id or str(record.id),
        status=status,
        enqueued_at=record.created_at,
        started_at=attempted,
        finished_at=finished,
        last_attempted_at=attempted,
        args=record.payload.get("args", []),
        kwargs=record.payload.get("kwargs", {}),
        backend=backend,
        errors=[_task_error(entry["error"]) for entry in record.errors],
        worker_ids=[record.lease_owner or "unknown"] * record.attempts,
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", record.result)
    return result


_FINISHED = (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED)


def _status(record: TaskRecord) -> TaskResultStatus:
    if record.state == "done":
        return TaskResultStatus.SUCCESSFUL
    if record.state == "dead":
        return TaskResultStatus.FAILED
    leased = record.lease_owner is not None and record.visible_at > timezone.now()
    return TaskResultStatus.RUNNING if leased else TaskResultStatus.READY


def _build_result(**values: Any) -> TaskResult:
    """TaskResult(**values), passing only the fields this Django version's TaskResult has."""
    return TaskResult(**{k: v for k, v in values.items() if k in _RESULT_FIELDS})


def _task_error(error: str) -> TaskError:
    """One failed attempt of the task's errors list as django.tasks reports it."""
    found = _RAISED_RE.findall(error)
    abandoned = DjangoTaskAbandoned
    path = found[-1] if found else f"{abandoned.__module__}.{abandoned.__qualname__}"
    return TaskError(exception_class_path=path, traceback=error)


def _load_task(path: str) -> Task:
    target = import_string(path)
    if not isinstance(target, Task):
        raise RivetError(
            f"{path} is {type(target).__name__}, not a Django Task; decorate it with @task"
        )
    return target


@job(DJANGO_TASK_KIND)
def run_django_task(context: JobContext) -> Any:
    """Import the Task the payload names and call it; its JSON return value is the result."""
    payload = context.payload
    task = _load_task(payload["func"])
    running = _build_result(
        task=task.using(queue_name=context.queue),
        id=str(context.task_id),
        status=TaskResultStatus.RUNNING,
        enqueued_at=None,
        started_at=timezone.now(),
        finished_at=None,
        last_attempted_at=timezone.now(),
        args=payload.get("args", []),
        kwargs=payload.get("kwargs", {}),
        backend=payload.get("backend", "default"),
        errors=[],
        worker_ids=[context.owner or "unknown"] * context.attempt,
    )
    task_started.send(RivetBackend, task_result=running)
    try:
        value = _call(task, running)
    except Exception as exc:
        text = _failure_text(exc)
        if context.is_last_attempt:
            object.__setattr__(running, "errors", [_task_error(text)])
            _finish(running, TaskResultStatus.FAILED)
        raise DjangoTaskFailed(text) from exc
    _finish(running, TaskResultStatus.SUCCESSFUL)
    return value


def _call(task: Task, running: TaskResult) -> Any:
    args, kwargs = running.args, running.kwargs
    if task.takes_context:
        value = task.call(TaskContext(task_result=running), *args, **kwargs)
    else:
        value = task.call(*args, **kwargs)
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise RivetError(f"{task.module_path} returned a value that is not JSON: {exc}") from exc


def _finish(running: TaskResult, status: TaskResultStatus) -> None:
    object.__setattr__(running, "status", status)
    object.__setattr__(running, "finished_at", timezone.now())
    task_finished.send(RivetBackend, task_result=running)


def _failure_text(exc: BaseException) -> str:
    """The traceback, then the class path last, where a clipped last_error still keeps it."""
    path = f"{type(exc).__module__}.{type(exc).__qualname__}"
    text = "".join(traceback.format_exception(exc)).rstrip()
    return f"{text}\n{_RAISED} {path}"
