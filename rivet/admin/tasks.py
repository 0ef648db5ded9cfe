"""Read-only admin pages for the task table and the fenced writes.

A queue row is never added or hand-edited in the admin: the store's statements own every state
change, guarded by the lease epoch. The dead letters, which operators do act on, have their own
page (rivet.admin.dead_letters).
"""

from __future__ import annotations

import json

from django.contrib import admin
from django.db.models import Q
from django.urls import reverse
from django.utils.html import format_html

from rivet.admin.large_tables import EstimatedCountPaginator, KindFilter, QueueFilter, TaskQuerySet
from rivet.admin.overview import queue_overview
from rivet.conf import rivet_settings
from rivet.models import FencedWrite, Task
from rivet.values import TaskState

#: The longest number a search treats as a task id (a bigint has 19 digits).
MAX_ID_DIGITS = 18


def pretty_json(value) -> str:
    """JSON indented for reading, HTML-escaped, in a <pre>."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    return format_html('<pre class="rivet-json">{}</pre>', text)


class ReadOnlyAdmin(admin.ModelAdmin):
    """No add, change or delete; reads go to the database alias rivet's store uses."""

    paginator = EstimatedCountPaginator
    show_full_result_count = False
    list_per_page = 50

    def get_queryset(self, request):
        return super().get_queryset(request).using(rivet_settings.DATABASE_ALIAS)

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class TaskAdminBase(ReadOnlyAdmin):
    """What the task and dead-letter pages share: columns, search, full payloads, counts."""

    list_filter = (QueueFilter, "state", KindFilter)
    search_fields = ("kind",)  # shows the search box; get_search_results does the matching
    search_help_text = "Exact match on a task id, a kind or an idempotency key."
    ordering = ("-id",)
    fieldsets = (
        (None, {"fields": ("id", "queue", "kind", "state", "priority", "idem_key", "unique_key")}),
        (
            "Attempts and lease",
            {"fields": ("attempts", "max_attempts", "lease_epoch", "lease_owner", "visible_at")},
        ),
        ("Times", {"fields": ("created_at", "updated_at")}),
        ("Payload, result, error", {"fields": ("payload_json", "result_json", "error_text")}),
    )
    readonly_fields = (
        "id",
        "queue",
        "kind",
        "state",
        "priority",
        "idem_key",
        "unique_key",
        "attempts",
        "max_attempts",
        "lease_epoch",
        "lease_owner",
        "visible_at",
        "created_at",
        "updated_at",
        "payload_json",
        "result_json",
        "error_text",
    )

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
        overview = queue_overview(rivet_settings.DATABASE_ALIAS)
        return super().changelist_view(
            request, {"queue_overview": overview, **(extra_context or {})}
        )

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


@admin.register(Task)
class TaskAdmin(TaskAdminBase):
    list_display = (
        "id",
        "queue",
        "kind",
        "state",
        "attempts_of_max",
        "lease_epoch",
        "lease_owner",
        "visible_at",
        "priority",
        "updated_at",
    )
    date_hierarchy = "created_at"


@admin.register(FencedWrite)
class FencedWriteAdmin(ReadOnlyAdmin):
    list_display = ("id", "task_link", "queue", "op", "owner", "epoch", "created_at")
    list_filter = ("op",)
    search_fields = ("owner",)  # shows the search box; get_search_results does the matching
    search_help_text = "Exact match on a task id or a worker (owner)."
    ordering = ("-id",)
    fields = ("id", "task_link", "queue", "op", "owner", "epoch", "created_at")
    readonly_fields = fields

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
        return format_html('<a href="{}">task {}</a>', url, fenced.task_id)
