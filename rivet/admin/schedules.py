"""Schedules in the admin: make and edit database schedules; see every schedule's next and
last run, code-declared ones included (read-only: their definition is the code's).

Actions (through ``rivet.schedules.operate``, as the command and the API): run now (needs
``rivet.run_schedule``), pause and resume (``rivet.change_schedule``), on code schedules too.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db import models
from django.forms.fields import InvalidJSONInput
from django.urls import reverse
from django.utils.html import format_html

from rivet.conf import rivet_settings
from rivet.errors import RivetError
from rivet.schedules import operate
from rivet.schedules.models import DEFINITION_FIELDS, Schedule
from rivet.schedules.values import Source
from rivet.stores import resolve_store
from rivet.text import json_depth_problem

STATE_FIELDS = ("source", "next_run", "last_tick_at", "last_task", "skipped_ticks", "last_error")


class PayloadField(forms.JSONField):
    """The payload box: its depth read before the parser, which recurses once per level (a
    payload nested past the stack would be a RecursionError and a 500, not a form error)."""

    def to_python(self, value):
        if isinstance(value, str):
            problem = json_depth_problem(value)
            if problem:
                raise forms.ValidationError(f"The payload {problem}.", code="too_deep")
        return super().to_python(value)

    def bound_data(self, data, initial):
        """The box shown again as typed, never parsed, when it nests too deeply."""
        if isinstance(data, str) and json_depth_problem(data):
            return InvalidJSONInput(data)
        return super().bound_data(data, initial)


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    formfield_overrides = {models.JSONField: {"form_class": PayloadField}}
    list_display = (
        "name",
        "state",
        "cron",
        "timezone",
        "kind",
        "next_run",
        "last_tick_at",
        "last_task",
        "source",
    )
    list_filter = ("enabled", "source", "missed")
    search_fields = ("name", "kind")
    actions = ["run_now", "pause", "resume"]
    readonly_fields = STATE_FIELDS
    fieldsets = (
        (None, {"fields": ("name", "kind", "enabled")}),
        ("When", {"fields": ("cron", "timezone", "missed", "max_missed")}),
        ("Task", {"fields": ("queue", "priority", "payload")}),
        ("History", {"fields": STATE_FIELDS}),
    )

    def get_queryset(self, request):
        return super().get_queryset(request).using(rivet_settings.DATABASE_ALIAS)

    def save_model(self, request, obj, form, change):
        obj.save(using=rivet_settings.DATABASE_ALIAS)

    def delete_model(self, request, obj):
        obj.delete(using=rivet_settings.DATABASE_ALIAS)

    def get_readonly_fields(self, request, obj=None):
        if obj is not None and obj.source == Source.CODE:
            return (*DEFINITION_FIELDS, *STATE_FIELDS)  # "enabled" stays the operator's
        return self.readonly_fields

    def has_delete_permission(self, request, obj=None):
        # A code schedule comes back at the next worker start: pause it instead.
        if obj is not None and obj.source == Source.CODE:
            return False
        return super().has_delete_permission(request, obj)

    @admin.display(description="state", boolean=False, ordering="enabled")
    def state(self, obj: Schedule) -> str:
        return "enabled" if obj.enabled else "paused"

    @admin.display(description="next run")
    def next_run(self, obj: Schedule):
        upcoming = operate.next_run(obj)
        return upcoming.isoformat(sep=" ") if upcoming else "-"

    @admin.display(description="last task")
    def last_task(self, obj: Schedule):
        task_id = operate.last_task_id(obj, alias=rivet_settings.DATABASE_ALIAS)
        if task_id is None:
            return "-"
        url = reverse("admin:rivet_task_change", args=[task_id])
        return format_html('<a href="{}">#{}</a>', url, task_id)

    def has_run_permission(self, request) -> bool:
        return request.user.has_perm("rivet.run_schedule")

    @admin.action(permissions=["run"], description="Run selected schedules now")
    def run_now(self, request, queryset):
        store, alias = resolve_store(), rivet_settings.DATABASE_ALIAS
        for schedule in queryset:
            try:
                result = operate.run_now(schedule.name, store=store, alias=alias)
            except RivetError as exc:
                self.message_user(request, f"{schedule.name}: not run: {exc}", messages.ERROR)
                continue
            self.message_user(request, f"{schedule.name}: enqueued task {result.task_id}")

    @admin.action(permissions=["change"], description="Pause selected schedules")
    def pause(self, request, queryset):
        self._switch(request, queryset, operate.pause, "paused")

    @admin.action(permissions=["change"], description="Resume selected schedules (from now)")
    def resume(self, request, queryset):
        self._switch(request, queryset, operate.resume, "resumed")

    def _switch(self, request, queryset, verb, done: str) -> None:
        alias = rivet_settings.DATABASE_ALIAS
        changed = [s.name for s in queryset if verb(s.name, alias=alias).changed]
        already = queryset.count() - len(changed)
        note = f" ({already} already were)" if already else ""
        self.message_user(request, f"{len(changed)} schedule(s) {done}{note}")
