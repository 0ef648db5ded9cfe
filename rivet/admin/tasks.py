"""Read-only admin pages for the task table and the fenced writes; the cancel action.

A queue row is never added or hand-edited in the admin: the store's statements own every state
change, guarded by the lease epoch. The one action on the task list, **cancel** (permission
``rivet.cancel_task``), is ``rivet.operations.cancel``, as ``rivet_dlq cancel`` and the API call
it. The dead letters, which operators do act on, have their own page (rivet.admin.dead_letters).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, ClassVar

from django.contrib import admin
from django.contrib.admin.models import CHANGE, LogEntry
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.text import capfirst

from rivet.admin.actions import ConfirmedActions
from rivet.admin.databases import DatabaseFilter, admin_alias, database_query
from rivet.admin.large_tables import EstimatedCountPaginator, KindFilter, QueueFilter, TaskQuerySet
from rivet.admin.overview import queue_overview
from rivet.conf import rivet_settings
from rivet.models import FencedWrite, Task
from rivet.operations.cancel import CANCEL_NOTE, CANCEL_SAYS, cancel
from rivet.producer import resolve_store
from rivet.values import CancelOutcome, TaskState

#: The longest number a search treats as a task id (a bigint has 19 digits).
MAX_ID_DIGITS = 18
#: What the admin log says of the tasks each cancel outcome changed.
CANCEL_LOG = {
    CancelOutcome.CANCELLED: "Cancelled: buried now (it was not running).",
    CancelOutcome.MARKED: "Cancel requested: its worker buries it at the next heartbeat.",
}
#: How the report names the tasks of each outcome.
CANCEL_VERBS = {CancelOutcome.CANCELLED: "Cancelled", CancelOutcome.MARKED: "Cancelling"}


def pretty_json(value) -> str:
    """JSON indented for reading, HTML-escaped, in a <pre>."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    return format_html('<pre class="rivet-json">{}</pre>', text)


def cancel_preview(task: Task, now: datetime) -> str:
    """What a cancel would do to the task, as the confirmation page lists it."""
    if task.state != TaskState.PENDING:
        return f"left as it is: already {task.state}"
    if task.lease_owner is not None and task.visible_at > now:
        return f"running on {task.lease_owner}: stopped at its next heartbeat, then buried"
    return "buried now: it moves to the dead letters"


def column(field: str, description: str, *, digits: int | None = None):
    """A list or page column showing ``field``; a timestamp to the second (``digits``: finer)."""

    @admin.display(description=description, ordering=field)
    def show(self, obj):
        value = getattr(obj, field)
        if value is None or digits is None:
            return value
        text = timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S.%f")
        return text[: len(text) - 6 + digits].rstrip(".")

    return show


class ReadOnlyAdmin(admin.ModelAdmin):
    """No add, change or delete; reads go to the database alias the page names (``databases``)."""

    paginator = EstimatedCountPaginator
    show_full_result_count = False
    # Facet counts run a COUNT per filter choice over the whole match: not on a big table.
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 50

    def get_queryset(self, request):
        return super().get_queryset(request).using(admin_alias(request))

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class TaskAdminBase(ReadOnlyAdmin):
    """What the task and dead-letter pages share: columns, search, full payloads, counts."""

    list_filter: ClassVar[tuple[Any, ...]] = (DatabaseFilter, QueueFilter, "state", KindFilter)
    search_fields = ("kind",)  # shows the search box; get_search_results does the matching
    search_help_text = "Exact match on a task id, a kind or an idempotency key."
    ordering: ClassVar[tuple[str, ...]] = ("-id",)
    fieldsets = (
        (None, {"fields": ("id", "queue", "kind", "state", "priority", "key", "unique_key")}),
        (
            "Attempts and lease",
            {"fields": ("attempts", "max_attempts", "lease_epoch", "lease_owner", "visible_ms")},
        ),
        ("Times", {"fields": ("created_ms", "updated_ms")}),
        (
            "Payload, result, errors",
            {"fields": ("payload_json", "result_json", "error_text", "errors_json")},
        ),
    )
    readonly_fields = (
        *("id", "queue", "kind", "state", "priority", "key", "unique_key", "attempts"),
        *("max_attempts", "lease_epoch", "lease_owner", "visible_ms", "created_ms", "updated_ms"),
        *("payload_json", "result_json", "error_text", "errors_json"),
    )
    key = column("idem_key", "idempotency key")
    visible = column("visible_at", "visible at", digits=0)
    updated = column("updated_at", "updated at", digits=0)
    visible_ms = column("visible_at", "visible at", digits=3)
    created_ms = column("created_at", "created at", digits=3)
    updated_ms = column("updated_at", "updated at", digits=3)

    class Media:
        css = {"all": ("rivet/admin.css",)}

    def get_queryset(self, request):
        base = super().get_queryset(request)
        return TaskQuerySet(model=self.model, query=base.query.chain(), using=base.db)

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        # Exact matches only, so that each one is an index lookup on a big table.
        match = Q(state__in=TaskState.values, kind=term) | Q(idem_key=term)
        if term.isdigit() and len(term) <= MAX_ID_DIGITS:
            match |= Q(pk=int(term))
        return queryset.filter(match), False

    def changelist_view(self, request, extra_context=None):
        # Django ignores an action it does not offer; a POST that names one anyway is refused.
        action = request.POST.get("action") if request.method == "POST" else None
        if action and action not in self.get_actions(request):
            raise PermissionDenied(f"you may not run the action {action!r} here")
        context = {
            "title": capfirst(self.model._meta.verbose_name_plural),
            "queue_overview": queue_overview(admin_alias(request)),
            **(extra_context or {}),
        }
        return super().changelist_view(request, context)

    @admin.display(description="attempts", ordering="attempts")
    def attempts_of_max(self, task):
        return f"{task.attempts} / {task.max_attempts}"

    @admin.display(description="payload")
    def payload_json(self, task):
        return pretty_json(task.payload)

    @admin.display(description="result")
    def result_json(self, task):
        return pretty_json(task.result)

    @admin.display(description="last error")
    def error_text(self, task):
        return format_html('<pre class="rivet-error">{}</pre>', task.last_error or "-")

    @admin.display(description="failed attempts")
    def errors_json(self, task):
        """The errors list, oldest first: every failed attempt of the task's whole life."""
        return pretty_json(task.errors) if task.errors else "-"


@admin.register(Task)
class TaskAdmin(ConfirmedActions, TaskAdminBase):
    list_display = (
        "id",
        "queue",
        "kind",
        "state",
        "attempts_of_max",
        "lease_epoch",
        "lease_owner",
        "visible",
        "priority",
        "updated",
    )
    date_hierarchy = "created_at"
    actions = ("cancel_selected",)

    def has_cancel_permission(self, request):
        return request.user.has_perm("rivet.cancel_task")

    @admin.action(permissions=["cancel"], description="Cancel selected tasks")
    def cancel_selected(self, request, queryset):
        if not self.has_cancel_permission(request):
            raise PermissionDenied
        tasks = self.chosen(queryset)
        if tasks is None or not self.confirmed(request):
            now = timezone.now()
            rows = [(task, cancel_preview(task, now)) for task in tasks or ()]
            return self.confirm(request, "cancel", tasks, rows=rows, cancel_note=CANCEL_NOTE)
        store = resolve_store(queryset.db)
        outcomes = [cancel(store, task_id) for task_id in self.confirmed_ids(request, tasks)]
        for said in CANCEL_LOG:
            ids = [o.task.id for o in outcomes if o.ok and o.cancel is said and o.task]
            self._report_cancel(request, queryset.db, said, ids)
        self.report_refused(request, "cancelled", [o for o in outcomes if not o.ok])
        return None

    def _report_cancel(self, request, alias: str, outcome: CancelOutcome, ids: list[int]) -> None:
        """Log and report the tasks one outcome changed."""
        if not ids:
            return
        changed = Task.objects.using(alias).filter(pk__in=ids)
        LogEntry.objects.log_actions(request.user.pk, list(changed), CHANGE, CANCEL_LOG[outcome])
        named = ", ".join(map(str, ids))
        tasks = self.rows_named(len(ids))
        says = capfirst(CANCEL_SAYS[outcome])
        self.message_user(request, f"{CANCEL_VERBS[outcome]} {tasks}: {named}. {says}.")


@admin.register(FencedWrite)
class FencedWriteAdmin(ReadOnlyAdmin):
    list_display = ("id", "task_link", "queue", "op", "owner", "epoch", "when")
    list_filter = (DatabaseFilter, "op")
    search_fields = ("owner",)  # shows the search box; get_search_results does the matching
    search_help_text = "Exact match on a task id or a worker (owner)."
    ordering = ("-id",)
    fields = ("id", "task_link", "queue", "op", "owner", "epoch", "when")
    readonly_fields = fields
    when = column("created_at", "when", digits=3)

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        match = Q(owner=term)
        if term.isdigit() and len(term) <= MAX_ID_DIGITS:
            match |= Q(task_id=int(term))
        return queryset.filter(match), False

    @admin.display(description="task", ordering="task_id")
    def task_link(self, fenced):
        url = reverse("admin:rivet_task_change", args=[fenced.task_id])
        url += database_query(fenced._state.db or rivet_settings.DATABASE_ALIAS)
        return format_html('<a href="{}">task {}</a>', url, fenced.task_id)
