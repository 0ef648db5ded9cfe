"""The OpenAPI description of rivet's HTTP API (drf-spectacular): every status, every error code.

Each error status has its own component (``Error400``, ``Error409``...) whose ``code`` is an
enum of exactly the codes that status can carry (``rivet.api.errors.ERROR_CODES``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers

from rivet.api.errors import ERROR_CODES
from rivet.api.serializers import (
    IDEMPOTENCY_HEADER,
    BulkEnqueueSerializer,
    BulkResultSerializer,
    CancelResultSerializer,
    EnqueueSerializer,
    ErrorSerializer,
    QueueStatsSerializer,
    SweepResultSerializer,
    TaskSerializer,
    idem_key_schema,
    name_schema,
)
from rivet.conf import rivet_settings
from rivet.jobs import registry
from rivet.values import CancelOutcome, TaskState

TAG = "rivet"
F = TypeVar("F", bound=Callable[..., Any])


#: Settings for drf-spectacular while it serves rivet's schema and docs (the host's own
#: SPECTACULAR_SETTINGS are left alone).
def _codes_table() -> str:
    rows = [
        f"| `{code}` | {', '.join(map(str, statuses))} | {meaning} |"
        for code, (statuses, meaning) in ERROR_CODES.items()
    ]
    return "\n".join(["| code | status | meaning |", "|---|---|---|", *rows])


SPECTACULAR = {
    "TITLE": "rivet task queue API",
    "DESCRIPTION": (
        "Enqueue tasks, read and cancel them, and act on the dead letters of rivet. Every "
        "error body has `detail` (for people) and `code` (for programs); validation errors keep "
        "DRF's field errors beside them.\n\n" + _codes_table()
    ),
    "VERSION": "1",
    "COMPONENT_SPLIT_REQUEST": True,
    # The Authorize button's credentials outlive a reload of the docs page (the browser's
    # localStorage), so a person with a token or a password types it once.
    "SWAGGER_UI_SETTINGS": {"persistAuthorization": True},
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "PREPROCESSING_HOOKS": ["rivet.api.schema.only_rivet_views"],
    # drf-spectacular's own enum hook first, so that the kinds stay inline (they change).
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "rivet.api.schema.registered_kinds",
    ],
    "ENUM_NAME_OVERRIDES": {
        "TaskStateEnum": TaskState.choices,
        "CancelOutcomeEnum": [o.value for o in CancelOutcome if o is not CancelOutcome.NOT_FOUND],
    },
}


def only_rivet_views(endpoints, **kwargs):
    """Keep rivet's own endpoints, whatever else the host serves."""
    return [
        endpoint
        for endpoint in endpoints
        if getattr(endpoint[3], "cls", None) is not None
        and endpoint[3].cls.__module__.startswith("rivet.api.")
    ]


def registered_kinds(result, generator, request, public):
    """A request's ``kind`` is one of the kinds this host registers, as the server checks,
    unless RIVET['ALLOW_UNKNOWN_KINDS'] lets any name through."""
    names = registry.names()
    if rivet_settings.ALLOW_UNKNOWN_KINDS is True or not names:
        return result
    for name, component in result.get("components", {}).get("schemas", {}).items():
        kind = component.get("properties", {}).get("kind")
        if name.endswith("Request") and isinstance(kind, dict) and kind.get("type") == "string":
            kind["enum"] = names
    return result


class RivetAutoSchema(AutoSchema):
    def get_tags(self) -> list[str]:
        return [TAG]

    def get_auth(self) -> list[dict[str, Any]]:
        """The host's schemes, without the ``{}`` (anonymous allowed) drf-spectacular adds for a
        host whose default permission is ``AllowAny``: rivet's floor refuses anonymous callers
        on every endpoint, whatever the host's permissions say."""
        return [requirement for requirement in super().get_auth() if requirement]


def security_schemes(authenticators) -> dict[str, Any]:
    """``components.securitySchemes`` for these authenticators, as the schema gives them: what
    the docs page offers behind its Authorize button before the schema itself can load."""
    schemes: dict[str, Any] = {}
    for authenticator in authenticators:
        scheme = OpenApiAuthenticationExtension.get_match(authenticator)
        if scheme is None:
            continue
        definitions = scheme.get_security_definition(RivetAutoSchema())
        if isinstance(scheme.name, str):
            schemes[scheme.name] = definitions
        else:
            schemes.update(zip(scheme.name, definitions, strict=True))
    return schemes


def rivet_schema(**kwargs: Any) -> Callable[[F], F]:
    """``extend_schema`` built on RivetAutoSchema, whatever the host's DEFAULT_SCHEMA_CLASS.

    drf-spectacular builds a decorated method's schema class on the host's
    ``REST_FRAMEWORK['DEFAULT_SCHEMA_CLASS']`` unless the method names one; DRF's own default
    (``rest_framework.schemas.openapi.AutoSchema``) then breaks every operation.
    """
    decorate = extend_schema(**kwargs)

    def apply(method: F) -> F:
        method.schema = RivetAutoSchema  # type: ignore[attr-defined]
        return decorate(method)

    return apply


class MetricsTokenScheme(OpenApiAuthenticationExtension):
    """``Authorization: Bearer <RIVET['METRICS_TOKEN']>`` on rivet/metrics/."""

    target_class = "rivet.api.permissions.MetricsTokenAuthentication"
    name = "rivetMetricsToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer"}


def _error_serializer(status: int) -> type[serializers.Serializer]:
    codes = sorted(code for code, (statuses, _) in ERROR_CODES.items() if status in statuses)
    meanings = "; ".join(f"`{code}`: {ERROR_CODES[code][1]}" for code in codes)
    fields = {
        "code": serializers.ChoiceField(choices=codes, help_text=meanings),
        "__doc__": f"An error answered with HTTP {status}.",
    }
    return type(f"Error{status}Serializer", (ErrorSerializer,), fields)


ERRORS = {
    status: _error_serializer(status)
    for status in sorted({s for statuses, _ in ERROR_CODES.values() for s in statuses})
}


class Error422Serializer(ERRORS[422]):  # type: ignore[misc,valid-type]
    """An error answered with HTTP 422: the key, and the task it already names."""

    idem_key = serializers.CharField(help_text="the key that names different work")
    existing_task_id = serializers.IntegerField(help_text="the task the key already names")


ERRORS[422] = Error422Serializer


def _errors(*statuses: int) -> dict[int, OpenApiResponse]:
    """Error responses, always with 401 and 403 (the auth floor) and 503 (the database)."""
    wanted = sorted({401, 403, 503, *statuses})
    return {
        status: OpenApiResponse(
            ERRORS[status],
            description=", ".join(c for c, (s, _) in ERROR_CODES.items() if status in s),
        )
        for status in wanted
    }


def action_schema(
    *errors: int,
    operation_id: str,
    summary: str,
    description: str,
    parameter: OpenApiParameter,
    response: Any,
    database: bool = False,
) -> Callable[[F], F]:
    """The schema of a ``POST`` action on one object: no body, 200 with ``response``, ``errors``
    (``database``: it takes the ``?database=`` parameter)."""
    return rivet_schema(
        operation_id=operation_id,
        summary=summary,
        description=description,
        parameters=[parameter, DATABASE] if database else [parameter],
        request=None,
        responses={200: response, **_errors(*errors)},
    )


def _name_filter(name: str, what: str) -> OpenApiParameter:
    return OpenApiParameter(
        name, name_schema(), OpenApiParameter.QUERY, required=False, description=what
    )


TASK_ID = OpenApiParameter("task_id", int, OpenApiParameter.PATH, description="task id")
DATABASE = OpenApiParameter(
    "database",
    str,
    OpenApiParameter.QUERY,
    required=False,
    description=(
        "the Django database alias to act on, one that holds queues (task ids are numbered by "
        "each database); default: RIVET['DATABASE_ALIAS'] for a task id, the queue's own "
        "database for a queue, every such database for a list of queues or the metrics"
    ),
)
QUEUE = OpenApiParameter("queue", name_schema(), OpenApiParameter.PATH, description="queue name")

list_tasks = rivet_schema(
    operation_id="rivet_tasks_list",
    summary="List tasks in id order (cursor pagination)",
    parameters=[
        _name_filter("queue", "only this queue"),
        _name_filter("kind", "only this kind"),
        OpenApiParameter(
            "state", str, OpenApiParameter.QUERY, required=False, enum=TaskState.values
        ),
        DATABASE,
    ],
    responses={200: TaskSerializer(many=True), **_errors(400, 404)},
)

enqueue = rivet_schema(
    operation_id="rivet_tasks_enqueue",
    summary="Enqueue one task",
    description=(
        f"The idempotency key comes from the `{IDEMPOTENCY_HEADER}` header or the `idem_key` "
        "field (both, and different: 400). A key used before with the same work answers 200 "
        "and the existing task; with different work, 422. Throttle scope: `rivet-enqueue`."
    ),
    parameters=[
        OpenApiParameter(
            IDEMPOTENCY_HEADER,
            idem_key_schema(),
            OpenApiParameter.HEADER,
            required=False,
            description=(
                "the idempotency key (or the idem_key field): visible ASCII (0x21-0x7E) but the "
                "comma, spaces only between characters; anything else, or the header sent "
                "twice, is 400 idempotency_key_invalid"
            ),
        )
    ],
    request=EnqueueSerializer,
    responses={
        201: OpenApiResponse(TaskSerializer, description="a new task"),
        200: OpenApiResponse(TaskSerializer, description="the key's task: same work"),
        **_errors(400, 413, 415, 422, 429),
    },
    examples=[
        OpenApiExample(
            "send an email",
            value={"kind": "send_email", "payload": {"to": "ada@example.com"}, "queue": "mail"},
            request_only=True,
        )
    ],
)

enqueue_bulk = rivet_schema(
    operation_id="rivet_tasks_bulk",
    summary="Enqueue several tasks at once, all or none",
    description=(
        "At most `RIVET['API_BULK_MAX']` tasks (default 1000). Every item is checked first: "
        "one invalid item refuses the whole call (400, errors keyed by the item's index) and "
        "nothing is written. Results keep the order given. 201 when any task is new, else 200. "
        "A key that already names other work: 422, nothing written; one key given to two "
        "different items of the call: 400 on the later item. Under an "
        f"`{IDEMPOTENCY_HEADER}` header each task is keyed `<key>:<index>`: the same call sent "
        "again writes nothing and answers 200 with the same tasks; other tasks under the same "
        "header: 422, nothing written; an item's own idem_key beside the header: 400."
    ),
    parameters=[
        OpenApiParameter(
            IDEMPOTENCY_HEADER,
            idem_key_schema(),
            OpenApiParameter.HEADER,
            required=False,
            description=(
                "keys the call's tasks `<key>:<index>` (visible ASCII but the comma, spaces "
                "only between characters, short enough to take `:<index>` within the key "
                "length); anything else, or the header sent twice, is 400"
            ),
        )
    ],
    request=BulkEnqueueSerializer,
    responses={
        201: BulkResultSerializer,
        200: BulkResultSerializer,
        **_errors(400, 413, 415, 422, 429),
    },
)

get_task = rivet_schema(
    operation_id="rivet_tasks_get",
    summary="One task",
    parameters=[TASK_ID, DATABASE],
    responses={200: TaskSerializer, **_errors(400, 404)},
)

cancel_task = action_schema(
    400,
    404,
    operation_id="rivet_tasks_cancel",
    summary="Cancel a task: bury it now, or stop it at its worker's next heartbeat",
    description=(
        "As `rivet.cancel(task_id)` and `rivet_dlq cancel`. A pending task that is not running "
        "is buried now (`cancelled`): it is in the dead letters, its last_error ending "
        "`cancelled by an operator`. A running one is marked (`marked`): its worker stops the "
        "handler at the next heartbeat and buries it the same way; it is never acked. A done or "
        "dead task is left as it is (`finished`). Requeue revives a cancelled task. Needs "
        "`rivet.cancel_task`."
    ),
    parameter=TASK_ID,
    response=CancelResultSerializer,
    database=True,
)

list_queues = rivet_schema(
    operation_id="rivet_queues_list",
    summary="Counts of every queue that holds tasks, on every database that holds queues",
    parameters=[DATABASE],
    responses={200: QueueStatsSerializer(many=True), **_errors(400)},
)

get_queue = rivet_schema(
    operation_id="rivet_queues_get",
    summary="Counts of one queue",
    parameters=[QUEUE, DATABASE],
    responses={200: QueueStatsSerializer, **_errors(400)},
)

sweep_queue = action_schema(
    400,
    operation_id="rivet_queues_sweep",
    summary="Bury pending tasks with no attempts left and no live lease",
    description=(
        "Moves to the dead letters what the next claim would bury anyway; needs "
        "`rivet.requeue_deadletter`. Use it when no worker polls the queue."
    ),
    parameter=QUEUE,
    response=SweepResultSerializer,
    database=True,
)

list_dead = rivet_schema(
    operation_id="rivet_dead_letters_list",
    summary="Dead tasks in id order (cursor pagination)",
    parameters=[_name_filter("queue", "only this queue"), DATABASE],
    responses={200: TaskSerializer(many=True), **_errors(400, 404)},
)

requeue_dead = action_schema(
    400,
    404,
    409,
    operation_id="rivet_dead_letters_requeue",
    summary="Requeue a dead task with fresh attempts (it keeps its idempotency key)",
    description=(
        "A replay, not a second effect, follows: the key the effect service saw is kept. "
        "Needs `rivet.requeue_deadletter`."
    ),
    parameter=TASK_ID,
    response=TaskSerializer,
    database=True,
)

purge_dead = rivet_schema(
    operation_id="rivet_dead_letters_purge",
    summary="Purge one dead task (releases its idempotency key)",
    description=(
        "Safe only past the effect service's dedup retention: sooner, a new task with the "
        "same key can make a second effect. Needs `rivet.purge_deadletter`."
    ),
    parameters=[TASK_ID, DATABASE],
    responses={204: OpenApiResponse(description="purged"), **_errors(400, 404, 409)},
)

metrics = rivet_schema(
    operation_id="rivet_metrics",
    summary="Queue gauges in the Prometheus text format, read from the database now",
    description=(
        "Needs `rivet.view_task`, or `Authorization: Bearer <RIVET['METRICS_TOKEN']>` when "
        "that setting is set. Without the `metrics` extra (prometheus-client) the answer is "
        "501 `extra_missing`, naming it. With queues on several databases each gauge has a "
        "`database` label."
    ),
    parameters=[DATABASE],
    responses={
        (200, "text/plain"): OpenApiResponse(OpenApiTypes.STR, description="exposition text"),
        # Errors are JSON here too (rivet.api.meta.json_errors), whatever the renderer.
        **{(status, "application/json"): body for status, body in _errors(400, 501).items()},
    },
)
