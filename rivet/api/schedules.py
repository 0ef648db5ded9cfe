"""The HTTP API's schedules: list them (next and last run), read one, run now, pause, resume.

The same actions as ``manage.py rivet_schedule`` (``rivet.schedules.operate``), under the same
permission floor as the rest of the API: reading needs ``rivet.view_schedule``, pausing and
resuming ``rivet.change_schedule``, running now ``rivet.run_schedule``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.response import Response

from rivet.api.schema import _errors, action_schema, rivet_schema
from rivet.api.serializers import name_schema
from rivet.api.views import RivetView
from rivet.schedules import operate
from rivet.schedules.models import Schedule
from rivet.validation import check_name

F = TypeVar("F", bound=Callable[..., Any])

VIEW, CHANGE, RUN = "rivet.view_schedule", "rivet.change_schedule", "rivet.run_schedule"


class ScheduleSerializer(serializers.Serializer):
    """A schedule, its state, and its next and last run."""

    name = serializers.CharField()
    kind = serializers.CharField()
    cron = serializers.CharField()
    timezone = serializers.CharField()
    queue = serializers.CharField(help_text="empty: the job's own queue")
    payload = serializers.JSONField()
    enabled = serializers.BooleanField()
    missed = serializers.CharField()
    max_missed = serializers.IntegerField()
    source = serializers.CharField(help_text="code (declared in a job) or database")
    next_run = serializers.DateTimeField(
        allow_null=True, help_text="the next tick owed (past when overdue); null while paused"
    )
    last_tick_at = serializers.DateTimeField(allow_null=True)
    last_task_id = serializers.IntegerField(
        allow_null=True, help_text="the last tick's task (null once pruned)"
    )
    skipped_ticks = serializers.IntegerField(help_text="ticks the missed-tick policy skipped")
    last_error = serializers.CharField()


class RunNowSerializer(serializers.Serializer):
    schedule = serializers.CharField()
    task_id = serializers.IntegerField(help_text="the task enqueued now")


def shown(schedule: Schedule, alias: str) -> dict[str, Any]:
    computed = {
        "next_run": operate.next_run(schedule),
        "last_task_id": operate.last_task_id(schedule, alias=alias),
    }
    fields = [name for name in ScheduleSerializer().fields if name not in computed]
    row = {name: getattr(schedule, name) for name in fields}
    return ScheduleSerializer({**row, **computed}).data


NAME = OpenApiParameter("name", name_schema(), OpenApiParameter.PATH, description="schedule name")

list_schedules = rivet_schema(
    operation_id="rivet_schedules_list",
    summary="Every schedule, with its next and last run",
    responses={200: ScheduleSerializer(many=True), **_errors()},
)
get_schedule = rivet_schema(
    operation_id="rivet_schedules_get",
    summary="One schedule",
    parameters=[NAME],
    responses={200: ScheduleSerializer, **_errors(404)},
)


def schedule_action(verb: str, summary: str, permission: str, response: Any) -> Callable[[F], F]:
    """The schema of ``POST schedules/<name>/<verb>/``, as ``rivet_schedule <verb>``."""
    return action_schema(
        404,
        operation_id=f"rivet_schedules_{verb}",
        summary=summary,
        description=f"As `rivet_schedule {verb}`. Needs `{permission}`.",
        parameter=NAME,
        response=response,
    )


run_schedule = schedule_action(
    "run", "Enqueue one task of the schedule now (its ticks go on as before)", RUN, RunNowSerializer
)
pause_schedule = schedule_action(
    "pause", "Stop the schedule's ticks; none is owed for the pause", CHANGE, ScheduleSerializer
)
resume_schedule = schedule_action(
    "resume",
    "Start a paused schedule again, owing the ticks after now",
    CHANGE,
    ScheduleSerializer,
)


class ScheduleView(RivetView):
    permissions_by_method = {"GET": VIEW}
    serializer_class = ScheduleSerializer

    def find(self, name: str) -> Schedule:
        try:
            check_name("schedule name", name)
            return operate.find(name, alias=self.get_alias())
        except operate.ScheduleNotFound as exc:
            raise NotFound(str(exc), code="not_found") from exc
        except ValueError as exc:  # not a name at all: no schedule has it
            raise NotFound(f"no schedule is called {name!r}", code="not_found") from exc


class ScheduleListView(ScheduleView):
    """``GET``: every schedule, by name."""

    @list_schedules
    def get(self, request, *args, **kwargs) -> Response:
        rows = Schedule.objects.using(self.get_alias()).order_by("name")
        return Response([shown(s, self.get_alias()) for s in rows])


class ScheduleDetailView(ScheduleView):
    """``GET``: one schedule."""

    @get_schedule
    def get(self, request, name: str, *args, **kwargs) -> Response:
        return Response(shown(self.find(name), self.get_alias()))


class ScheduleRunView(ScheduleView):
    """``POST``: enqueue one task of the schedule now."""

    permissions_by_method = {"POST": RUN}
    serializer_class = RunNowSerializer

    @run_schedule
    def post(self, request, name: str, *args, **kwargs) -> Response:
        schedule = self.find(name)
        result = operate.run_now(schedule.name, store=self.get_store(), alias=self.get_alias())
        return Response({"schedule": schedule.name, "task_id": result.task_id})


class ScheduleChangeView(ScheduleView):
    """``POST``: pause or resume the schedule, answering with it as it is now."""

    permissions_by_method = {"POST": CHANGE}

    def change(self, verb: Callable[..., operate.Changed], name: str) -> Response:
        done = verb(self.find(name).name, alias=self.get_alias())
        return Response(shown(done.schedule, self.get_alias()))


class SchedulePauseView(ScheduleChangeView):
    """``POST``: pause the schedule."""

    @pause_schedule
    def post(self, request, name: str, *args, **kwargs) -> Response:
        return self.change(operate.pause, name)


class ScheduleResumeView(ScheduleChangeView):
    """``POST``: resume the schedule."""

    @resume_schedule
    def post(self, request, name: str, *args, **kwargs) -> Response:
        return self.change(operate.resume, name)
