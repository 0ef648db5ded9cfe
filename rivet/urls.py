"""rivet's HTTP API. A host includes it with ``path("rivet/", include("rivet.urls"))``.

Without the ``api`` extra the include still imports, so every manage.py command keeps working:
system check rivet.E010 names the extra, and every path under the prefix answers 501 JSON
(``extra_missing``) saying what to install.
"""

from django.http import JsonResponse
from django.urls import path, re_path

from rivet.errors import RivetConfigError

app_name = "rivet"

try:
    from rivet.api import meta, schedules, views
except RivetConfigError as missing:
    MISSING_API: RivetConfigError | None = missing
else:
    MISSING_API = None


def missing_api(request, *args, **kwargs) -> JsonResponse:
    """Any path under rivet's prefix when the ``api`` extra is not installed."""
    return JsonResponse({"detail": str(MISSING_API), "code": "extra_missing"}, status=501)


if MISSING_API is not None:
    urlpatterns = [re_path(r"^[\s\S]*\Z", missing_api, name="not-found")]
else:
    urlpatterns = [
        path("tasks/", views.TaskListCreateView.as_view(), name="task-list"),
        path("tasks/bulk/", views.TaskBulkView.as_view(), name="task-bulk"),
        path("tasks/<str:task_id>/", views.TaskDetailView.as_view(), name="task-detail"),
        path("tasks/<str:task_id>/cancel/", views.TaskCancelView.as_view(), name="task-cancel"),
        path("queues/", views.QueueListView.as_view(), name="queue-list"),
        # A queue in a path is any text up to the last slash; the view says what is wrong.
        re_path(
            r"^queues/(?P<queue>[\s\S]+)/sweep/\Z",
            views.QueueSweepView.as_view(),
            name="queue-sweep",
        ),
        re_path(
            r"^queues/(?P<queue>[\s\S]+)/\Z", views.QueueDetailView.as_view(), name="queue-detail"
        ),
        path("dead-letters/", views.DeadLetterListView.as_view(), name="dead-letter-list"),
        path(
            "dead-letters/<str:task_id>/",
            views.DeadLetterDetailView.as_view(),
            name="dead-letter-detail",
        ),
        path(
            "dead-letters/<str:task_id>/requeue/",
            views.DeadLetterRequeueView.as_view(),
            name="dead-letter-requeue",
        ),
        path("schedules/", schedules.ScheduleListView.as_view(), name="schedule-list"),
        path(
            "schedules/<str:name>/", schedules.ScheduleDetailView.as_view(), name="schedule-detail"
        ),
        *(
            path(f"schedules/<str:name>/{action}/", view.as_view(), name=f"schedule-{action}")
            for action, view in (
                ("run", schedules.ScheduleRunView),
                ("pause", schedules.SchedulePauseView),
                ("resume", schedules.ScheduleResumeView),
            )
        ),
        path("metrics/", meta.MetricsView.as_view(), name="metrics"),
        path("schema/", meta.SchemaView.as_view(), name="schema"),
        path("docs/", meta.DocsView.as_view(url_name="rivet:schema"), name="docs"),
        # Swagger UI's own files, from drf-spectacular-sidecar: the host installs no app for them.
        path("docs/assets/<str:name>", meta.docs_asset, name="docs-asset"),
        # Anything else under rivet's prefix: a JSON 404, not the host's HTML page.
        re_path(r"^[\s\S]*\Z", meta.NotFoundView.as_view(), name="not-found"),
    ]
