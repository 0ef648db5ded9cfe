"""rivet's HTTP API views. Writes go through the Store: requeue, purge, sweep and cancel through
rivet.operations, as ``rivet_dlq`` and the admin do, whose refusals the API answers in their
words (the error's ``detail``).

The store is the configured one (``rivet.producer.resolve_store``), or the one of the
database ``?database=ALIAS`` names (an alias that holds queues, ``rivet.routing``): task ids are
numbered by each database, so a task on another alias is addressed by its id and that
parameter, and every task body says its ``database``. An enqueue goes to the database of its
queue (a bulk call whose queues live on several databases is refused), a queue's counts and
sweep to its queue's (``?database=`` wins), and the queue list
reads every database that holds queues. Every task the API shows is read from its database
through the ORM, one row or a page of them (paged with a cursor), and queue counts come from
``Store.queue_overview``. An enqueue runs on Django's connection for that database, so with
``ATOMIC_REQUESTS`` it commits or rolls back with the request.
"""

from __future__ import annotations

from typing import Any, NoReturn

from django.db import transaction
from django.db.models import QuerySet
from rest_framework import generics, serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.pagination import CursorPagination
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.settings import api_settings

from rivet import producer
from rivet.api import schema
from rivet.api.errors import Conflict, PayloadTooLargeError, Unprocessable, exception_handler
from rivet.api.permissions import EnqueueThrottle, host_authenticators, permissions_for
from rivet.api.serializers import (
    IDEMPOTENCY_HEADER,
    BulkEnqueueSerializer,
    CancelResultSerializer,
    EnqueueSerializer,
    QueueStatsSerializer,
    SweepResultSerializer,
    TaskSerializer,
    checked_header_key,
)
from rivet.conf import rivet_settings
from rivet.errors import BatchKeyClash, InvalidInput, PayloadTooLarge, RivetConfigError
from rivet.idempotency.parsers import EnvelopeJSONParser
from rivet.models import Task
from rivet.operations import dead_letters
from rivet.operations.cancel import cancel
from rivet.operations.outcome import NOT_FOUND, Outcome, no_task
from rivet.routing import queue_aliases
from rivet.stores import queue_stores, store_for_queue
from rivet.stores.base import Store
from rivet.validation import check_name
from rivet.values import TaskState

VIEW, ADD = "rivet.view_task", "rivet.add_task"
REQUEUE, PURGE = "rivet.requeue_deadletter", "rivet.purge_deadletter"
CANCEL = "rivet.cancel_task"
MAX_TASK_ID = 2**63 - 1  # bigint


def query_value(params, name: str) -> str | None:
    """One query parameter, given at most once (a repeated filter is refused, not guessed)."""
    values = params.getlist(name)
    if len(values) > 1:
        raise InvalidInput(f"give {name} once, got it {len(values)} times", field=name)
    return values[0] if values else None


class TaskCursorPagination(CursorPagination):
    """Pages of tasks in id order; ``cursor`` is opaque, ``page_size`` 1..1000 (default 100)."""

    ordering = "id"
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000

    def get_page_size(self, request) -> int:
        query_value(request.query_params, self.cursor_query_param)
        text = query_value(request.query_params, self.page_size_query_param)
        if text is None:
            return self.page_size
        valid = text.isascii() and text.isdigit() and 1 <= int(text) <= self.max_page_size
        if not valid:
            raise InvalidInput(
                f"page_size must be an integer from 1 to {self.max_page_size}, got {text!r}",
                field="page_size",
            )
        return int(text)

    def get_schema_operation_parameters(self, view) -> list[dict[str, Any]]:
        """The cursor and page_size parameters, page_size with the bounds the server applies."""
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"] = {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": self.max_page_size,
                    "default": self.page_size,
                }
        return parameters


class RivetView(generics.GenericAPIView):
    """The base of every rivet view: the auth floor, rivet's error bodies, the store."""

    schema = schema.RivetAutoSchema()
    parser_classes = [EnvelopeJSONParser]
    renderer_classes = [JSONRenderer]
    #: The permission the method needs, by HTTP method.
    permissions_by_method: dict[str, str] = {}
    pagination_class: type[CursorPagination] | None = None

    @property
    def required_permission(self) -> str | None:
        return self.permissions_by_method.get(self.request.method, VIEW)

    def get_authenticators(self):
        return host_authenticators()

    def get_permissions(self):
        return permissions_for(self)

    def get_exception_handler(self):
        return exception_handler

    #: The store a write went to (the database of its queue), which the reads after it use.
    written_to: Store | None = None

    def get_store(self) -> Store:
        """The store a write went to, else that of ``?database=``, else the configured one."""
        if self.written_to is not None:
            return self.written_to
        return producer.resolve_store(self.database_param())

    def queue_store(self, queue: str) -> Store:
        """The store that holds ``queue`` (``?database=`` wins)."""
        return store_for_queue(queue, self.database_param())

    def database_param(self) -> str | None:
        """The alias ``?database=`` names (one that holds queues), None when not given."""
        alias = query_value(self.request.query_params, "database")
        if alias is None:
            return None
        aliases = queue_aliases()
        if alias not in aliases:
            raise InvalidInput(
                f"database must be an alias that holds queues ({', '.join(aliases)}), "
                f"got {alias!r}",
                field="database",
            )
        return alias

    def get_alias(self) -> str:
        store = self.get_store()
        if store.using is None:
            raise RivetConfigError(
                f"the {store.name} store keeps no database rows; rivet's HTTP API reads tasks "
                "from a SQL store (PostgreSQL or SQLite)"
            )
        return store.using

    def tasks(self) -> QuerySet[Task]:
        """The task rows of the store's database: every read of the API starts here."""
        return Task.objects.using(self.get_alias())

    def render_task(self, task: Task, status_code: int = 200) -> Response:
        return Response(TaskSerializer(task).data, status=status_code)

    def find_task(self, task_id: str | int) -> Task:
        number = parse_task_id(task_id)
        task = None if number is None else self.tasks().filter(pk=number).first()
        if task is None:
            raise NotFound(no_task(task_id), code="not_found")
        return task

    def operation_target(self, task_id: str) -> int:
        """The id an operation acts on; 404 when it cannot be one (the operation looks it up).
        A store that keeps no database rows is refused first, as every read of the API is."""
        self.get_alias()
        number = parse_task_id(task_id)
        if number is None:
            raise NotFound(no_task(task_id), code="not_found")
        return number


def refuse(outcome: Outcome) -> NoReturn:
    """An operation's refusal as an error answer: its code, its message as the detail.
    ``not_found`` is 404; ``not_dead`` and ``not_requeued`` are 409 (a cancel's
    ``nothing_to_cancel`` is no error here: it answers 200, outcome ``finished``)."""
    if outcome.code == NOT_FOUND:
        raise NotFound(outcome.message, code=NOT_FOUND)
    raise Conflict(outcome.message, code=outcome.code)


def parse_task_id(text: str | int) -> int | None:
    """A task id from a URL: a positive 64-bit integer, else None (answered as 404)."""
    text = str(text)
    if not (text.isascii() and text.isdigit()):
        return None
    number = int(text)
    return number if 0 < number <= MAX_TASK_ID else None


def _filter_name(params, what: str) -> str | None:
    value = query_value(params, what)
    return None if value is None else check_name(what, value)


class TaskListCreateView(RivetView):
    """``GET``: tasks by id, filtered by queue, state and kind. ``POST``: enqueue one task."""

    permissions_by_method = {"POST": ADD}
    pagination_class = TaskCursorPagination
    serializer_class = TaskSerializer
    throttle_scope = "rivet-enqueue"

    def get_throttles(self):
        throttles = [cls() for cls in api_settings.DEFAULT_THROTTLE_CLASSES]
        if self.request.method == "POST":
            throttles.append(EnqueueThrottle())
        return throttles

    def get_queryset(self) -> QuerySet[Task]:
        params = self.request.query_params
        rows = self.tasks()
        for name in ("queue", "kind"):
            value = _filter_name(params, name)
            if value is not None:
                rows = rows.filter(**{name: value})
        state = query_value(params, "state")
        if state is not None:
            if state not in TaskState.values:
                raise InvalidInput(
                    f"state must be one of {', '.join(TaskState.values)}, got {state!r}",
                    field="state",
                )
            rows = rows.filter(state=state)
        return rows

    @schema.list_tasks
    def get(self, request, *args, **kwargs) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(TaskSerializer(page, many=True).data)

    @schema.enqueue
    def post(self, request, *args, **kwargs) -> Response:
        context = {"idempotency_key": request.headers.get(IDEMPOTENCY_HEADER)}
        incoming = EnqueueSerializer(data=request.data, context=context)
        incoming.is_valid(raise_exception=True)
        data = dict(incoming.validated_data)
        kind, payload = data.pop("kind"), data.pop("payload", None)
        self.written_to = store_for_queue(producer.task_spec(kind, payload, **data).queue)
        result = producer.enqueue(kind, payload, using=self.written_to, **data)
        code = status.HTTP_200_OK if result.duplicate else status.HTTP_201_CREATED
        return self.render_task(self.find_task(result.task_id), code)


class TaskBulkView(RivetView):
    """``POST``: enqueue up to RIVET['API_BULK_MAX'] tasks in one transaction, all or none."""

    permissions_by_method = {"POST": ADD}
    serializer_class = BulkEnqueueSerializer
    throttle_scope = "rivet-enqueue"

    def get_throttles(self):
        return [*(cls() for cls in api_settings.DEFAULT_THROTTLE_CLASSES), EnqueueThrottle()]

    @schema.enqueue_bulk
    def post(self, request, *args, **kwargs) -> Response:
        header = checked_header_key(request.headers.get(IDEMPOTENCY_HEADER))
        incoming = BulkEnqueueSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        items = incoming.validated_data["tasks"]
        self._check_count(len(items))
        checked = self._check_items(items)
        if header is not None:
            checked = _keyed_by_header(checked, header)
        try:
            results = self._enqueue(checked, header)
        except BatchKeyClash as exc:  # an error of the call itself: no task to name
            error = serializers.ValidationError(str(exc), code="invalid_input")
            raise serializers.ValidationError(
                {"tasks": {str(exc.index): {"idem_key": error.detail}}}
            ) from exc
        if checked:  # the batch's one database (enqueue_many refused a mixed one)
            self.written_to = store_for_queue(producer.task_spec(**checked[0]).queue)
        tasks = self.tasks().in_bulk([result.task_id for result in results])
        body = [
            {"created": not result.duplicate, "task": TaskSerializer(tasks[result.task_id]).data}
            for result in results
        ]
        created = any(not result.duplicate for result in results)
        code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        return Response({"results": body}, status=code)

    def _enqueue(self, checked: list[dict[str, Any]], header: str | None) -> list[Any]:
        """The batch, in one transaction; under an Idempotency-Key header, a retry of the same
        call finds every task's key taken (a replay: nothing written), and a call of other
        tasks under the same header writes nothing and answers 422."""
        if header is None or not checked:
            return producer.enqueue_many(checked)
        alias = store_for_queue(producer.task_spec(**checked[0]).queue).using
        with transaction.atomic(using=alias):
            results = producer.enqueue_many(checked)
            new = sum(not result.duplicate for result in results)
            if 0 < new < len(results):  # rolled back with the transaction
                raise Unprocessable(
                    f"the {IDEMPOTENCY_HEADER} header {header!r} already names a bulk call of "
                    f"other tasks ({len(results) - new} of these {len(results)} tasks are in it, "
                    f"{new} are not); use a new key for new work",
                    code="idempotency_mismatch",
                )
            if not new and _keyed_task_exists(alias, f"{header}:{len(results)}"):
                raise Unprocessable(
                    f"the {IDEMPOTENCY_HEADER} header {header!r} already names a bulk call of "
                    f"more tasks than these {len(results)} (its task {len(results)} is "
                    f"{header}:{len(results)}); send the whole call again, or use a new key",
                    code="idempotency_mismatch",
                )
        return results

    def _check_count(self, count: int) -> None:
        limit = rivet_settings.API_BULK_MAX
        if count > limit:
            raise serializers.ValidationError(
                {"tasks": [f"{count} tasks in one call; at most {limit} (RIVET['API_BULK_MAX'])"]},
                code="too_many_tasks",
            )

    def _check_items(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Every item checked before anything is written; errors keyed by the item's index."""
        errors: dict[str, Any] = {}
        checked = []
        for index, item in enumerate(items):
            one = EnqueueSerializer(data=item, context={})
            try:
                valid = one.is_valid()
            except PayloadTooLarge as exc:
                raise PayloadTooLargeError(f"task {index}: {exc}") from exc
            if valid:
                checked.append(dict(one.validated_data))
            else:
                errors[str(index)] = one.errors
        if errors:
            raise serializers.ValidationError({"tasks": errors})
        return checked


def _keyed_by_header(checked: list[dict[str, Any]], header: str) -> list[dict[str, Any]]:
    """The items of a bulk call under an Idempotency-Key header, each keyed ``<header>:<index>``
    (the same call sent again names the same tasks). An item's own idem_key is refused beside
    the header: one call, one way of naming its tasks."""
    errors = {
        str(index): {
            "idem_key": [
                f"the {IDEMPOTENCY_HEADER} header keys every task of a bulk call "
                f"('{header}:{index}' here); give it or the items' idem_key fields, not both"
            ]
        }
        for index, item in enumerate(checked)
        if item.get("idem_key") is not None
    }
    if errors:
        raise serializers.ValidationError({"tasks": errors}, code="idempotency_key_conflict")
    last = f"{header}:{len(checked) - 1}"
    limit = rivet_settings.MAX_IDEM_KEY_LENGTH
    if len(last) > limit:
        message = (
            f"in a bulk call each task's key is the {IDEMPOTENCY_HEADER} header and ':<index>'; "
            f"{last[:20]!r}... is {len(last)} characters, at most {limit}: send a key of at "
            f"most {limit - len(last) + len(header)} characters"
        )
        raise serializers.ValidationError({"idem_key": [message]}, code="idempotency_key_invalid")
    return [{**item, "idem_key": f"{header}:{index}"} for index, item in enumerate(checked)]


class TaskDetailView(RivetView):
    """``GET``: one task by id."""

    serializer_class = TaskSerializer

    @schema.get_task
    def get(self, request, task_id: str, *args, **kwargs) -> Response:
        return self.render_task(self.find_task(task_id))


class TaskCancelView(RivetView):
    """``POST``: cancel a task (``rivet.cancel``): buried now, or marked for its worker."""

    permissions_by_method = {"POST": CANCEL}
    serializer_class = CancelResultSerializer

    @schema.cancel_task
    def post(self, request, task_id: str, *args, **kwargs) -> Response:
        outcome = cancel(self.get_store(), self.operation_target(task_id))
        if outcome.cancel is None:  # not found (a task done or dead already is answered 200)
            refuse(outcome)
        task = TaskSerializer(self.find_task(task_id)).data
        return Response({"outcome": outcome.cancel.value, "task": task})


class QueueListView(RivetView):
    """``GET``: the counts of every queue that holds a task or a fenced write."""

    serializer_class = QueueStatsSerializer

    @schema.list_queues
    def get(self, request, *args, **kwargs) -> Response:
        param = self.database_param()
        stores = queue_stores() if param is None else [(param, self.get_store())]
        rows = [
            {**stats.as_dict(), "database": alias}
            for alias, store in stores
            for stats in store.queue_overview()
        ]
        return Response(QueueStatsSerializer(rows, many=True).data)


class QueueDetailView(RivetView):
    """``GET``: the counts of one queue (zeros for a queue with no tasks)."""

    serializer_class = QueueStatsSerializer

    @schema.get_queue
    def get(self, request, queue: str, *args, **kwargs) -> Response:
        queue = check_name("queue", queue)
        store = self.queue_store(queue)
        body = {**store.queue_stats(queue).as_dict(), "database": self._alias_of(store)}
        return Response(QueueStatsSerializer(body).data)

    def _alias_of(self, store: Store) -> str:
        return store.using or rivet_settings.DATABASE_ALIAS


class QueueSweepView(RivetView):
    """``POST``: bury the queue's pending tasks whose attempts are used up and lease lapsed."""

    permissions_by_method = {"POST": REQUEUE}
    serializer_class = SweepResultSerializer

    @schema.sweep_queue
    def post(self, request, queue: str, *args, **kwargs) -> Response:
        queue = check_name("queue", queue)
        swept = dead_letters.sweep(self.queue_store(queue), queue)
        return Response({"queue": queue, "swept": swept.count})


class DeadLetterListView(RivetView):
    """``GET``: dead tasks by id, of one queue (``?queue=``) or all."""

    pagination_class = TaskCursorPagination
    serializer_class = TaskSerializer

    def get_queryset(self) -> QuerySet[Task]:
        rows = self.tasks().filter(state=TaskState.DEAD)
        queue = _filter_name(self.request.query_params, "queue")
        return rows if queue is None else rows.filter(queue=queue)

    @schema.list_dead
    def get(self, request, *args, **kwargs) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(TaskSerializer(page, many=True).data)


class DeadLetterDetailView(RivetView):
    """``DELETE``: purge one dead task (its idempotency key is released)."""

    permissions_by_method = {"DELETE": PURGE}

    @schema.purge_dead
    def delete(self, request, task_id: str, *args, **kwargs) -> Response:
        outcome = dead_letters.purge(self.get_store(), self.operation_target(task_id))
        if not outcome.ok:
            refuse(outcome)
        return Response(status=status.HTTP_204_NO_CONTENT)


class DeadLetterRequeueView(RivetView):
    """``POST``: make a dead task pending again with fresh attempts; it keeps its key."""

    permissions_by_method = {"POST": REQUEUE}
    serializer_class = TaskSerializer

    @schema.requeue_dead
    def post(self, request, task_id: str, *args, **kwargs) -> Response:
        outcome = dead_letters.requeue(self.get_store(), self.operation_target(task_id))
        if not outcome.ok:
            refuse(outcome)
        return self.render_task(self.find_task(task_id))


def _keyed_task_exists(alias: str | None, key: str) -> bool:
    """Whether a task of that idempotency key is in the database (any state)."""
    return Task.objects.using(alias).filter(idem_key=key).exists()
