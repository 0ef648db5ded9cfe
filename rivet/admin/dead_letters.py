"""The dead letters in the admin: read them, requeue or purge them, sweep a queue into them.

Every action goes through rivet.operations, as ``manage.py rivet_dlq`` and the HTTP API do,
writes Django's admin log and reports what it did (and, in the operation's words, why it left a
task alone). Permissions:

- viewing: ``rivet.view_task`` (or the proxy's own ``rivet.view_deadletter``);
- requeue: ``rivet.requeue_deadletter``;
- purge: ``rivet.purge_deadletter``;
- sweep: ``rivet.requeue_deadletter`` too. A sweep only buries what the next claim would bury
  anyway (tasks whose attempts are used up and whose lease lapsed); it runs no handler and
  releases no key. Whoever may bring dead letters back may also gather them.

An action a user may not take is not offered, and a POST that names it anyway gets 403.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.text import capfirst

from rivet.admin.actions import ConfirmedActions
from rivet.admin.databases import DatabaseFilter
from rivet.admin.large_tables import KindFilter, QueueFilter, distinct_values
from rivet.admin.tasks import TaskAdminBase, column
from rivet.errors import InvalidInput
from rivet.models import DeadLetter, Task
from rivet.operations import dead_letters
from rivet.operations.dead_letters import PURGE_CAVEAT, REQUEUE_NOTE, SWEEP_NOTE
from rivet.producer import resolve_store
from rivet.routing import queue_aliases
from rivet.stores import store_for_queue
from rivet.validation import check_name

ERROR_TAIL = 90


def error_tail(text: str) -> str:
    """The error on one line, cut from the front: the reason a task died is at its end."""
    line = " ".join(text.split())
    return line if len(line) <= ERROR_TAIL else "..." + line[-(ERROR_TAIL - 3) :]


@admin.register(DeadLetter)
class DeadLetterAdmin(ConfirmedActions, TaskAdminBase):
    list_display = ("id", "queue", "kind", "attempts_of_max", "buried", "key", "last_error_end")
    list_filter = (DatabaseFilter, QueueFilter, KindFilter)
    ordering = ("-updated_at", "-id")
    actions = ("requeue_selected", "purge_selected")

    # -- permissions -------------------------------------------------------------------------

    def has_view_permission(self, request, obj=None):
        return request.user.has_perm("rivet.view_task") or super().has_view_permission(request, obj)

    def has_requeue_permission(self, request):
        return request.user.has_perm("rivet.requeue_deadletter")

    def has_purge_permission(self, request):
        return request.user.has_perm("rivet.purge_deadletter")

    def changelist_view(self, request, extra_context=None):
        context = {"can_sweep": self.has_requeue_permission(request), **(extra_context or {})}
        return super().changelist_view(request, context)

    # -- columns -----------------------------------------------------------------------------

    buried = column("updated_at", "buried", digits=0)

    @admin.display(description="last error (its end)")
    def last_error_end(self, task):
        return error_tail(task.last_error)

    # -- actions -----------------------------------------------------------------------------

    @admin.action(permissions=["requeue"], description="Requeue selected dead letters")
    def requeue_selected(self, request, queryset):
        if not self.has_requeue_permission(request):
            raise PermissionDenied
        tasks = self.chosen(queryset)
        if tasks is None or not self.confirmed(request):
            return self._confirm(request, "requeue", tasks)
        store = resolve_store(queryset.db)
        outcomes = [dead_letters.requeue(store, i) for i in self.confirmed_ids(request, tasks)]
        done = [outcome.task for outcome in outcomes if outcome.ok and outcome.task]
        if done:
            requeued = Task.objects.using(queryset.db).filter(pk__in=[t.id for t in done])
            LogEntry.objects.log_actions(
                request.user.pk, list(requeued), CHANGE, "Requeued from the dead letters."
            )
            ids = ", ".join(str(task.id) for task in done)
            self.message_user(
                request, f"Requeued {self.rows_named(len(done))}: {ids}. {REQUEUE_NOTE}"
            )
        self.report_refused(request, "requeued", [o for o in outcomes if not o.ok])
        return None

    @admin.action(permissions=["purge"], description="Purge selected dead letters")
    def purge_selected(self, request, queryset):
        if not self.has_purge_permission(request):
            raise PermissionDenied
        tasks = self.chosen(queryset)
        if tasks is None or not self.confirmed(request):
            return self._confirm(request, "purge", tasks)
        store = resolve_store(queryset.db)
        outcomes = [dead_letters.purge(store, i) for i in self.confirmed_ids(request, tasks)]
        purged_ids = {outcome.task.id for outcome in outcomes if outcome.ok and outcome.task}
        purged = [task for task in tasks if task.id in purged_ids]
        if purged:
            self.log_deletions(request, purged)
            ids = ", ".join(str(task.id) for task in purged)
            self.message_user(
                request,
                f"Purged {self.rows_named(len(purged))}: {ids}; their idempotency keys are "
                "released.",
            )
        self.report_refused(request, "purged", [o for o in outcomes if not o.ok])
        return None

    def _confirm(self, request, verb: str, tasks: list[DeadLetter] | None):
        return self.confirm(
            request,
            verb,
            tasks,
            rows=[(task, error_tail(task.last_error)) for task in tasks or ()],
            keyed=sum(1 for task in tasks or () if task.idem_key),
            requeue_note=REQUEUE_NOTE,
            purge_caveat=PURGE_CAVEAT,
        )

    # -- sweep -------------------------------------------------------------------------------

    def get_urls(self):
        sweep = path(
            "sweep/",
            self.admin_site.admin_view(self.sweep_view),
            name="rivet_deadletter_sweep",
        )
        return [sweep, *super().get_urls()]

    def sweep_view(self, request):
        if not self.has_view_permission(request) or not self.has_requeue_permission(request):
            raise PermissionDenied("sweeping a queue needs the permission rivet.requeue_deadletter")
        queues = sorted({q for alias in queue_aliases() for q in distinct_values(alias, "queue")})
        form = SweepForm(request.POST or None, queues=queues)
        if request.method == "POST" and form.is_valid():
            return self._sweep(request, form.cleaned_data["queue"])
        context = {
            **self.admin_site.each_context(request),
            "title": "Sweep a queue into the dead letters",
            "opts": self.model._meta,
            "form": form,
            "sweep_note": SWEEP_NOTE,
        }
        return TemplateResponse(request, "admin/rivet/deadletter/sweep.html", context)

    def _sweep(self, request, queue: str):
        swept = dead_letters.sweep(store_for_queue(queue), queue)
        LogEntry.objects.create(
            user_id=request.user.pk,
            content_type=ContentType.objects.get_for_model(DeadLetter, for_concrete_model=False),
            object_id=None,
            object_repr=f"queue {queue}"[:200],
            action_flag=CHANGE,
            change_message=f"{capfirst(swept.message)}.",
        )
        self.message_user(request, f"{capfirst(swept.message)}.")
        url = reverse("admin:rivet_deadletter_changelist")
        return HttpResponseRedirect(f"{url}?queue={queue}")


class SweepForm(forms.Form):
    queue = forms.CharField(max_length=100, help_text="The queue to sweep.")

    def __init__(self, *args, queues: list[str], **kwargs):
        super().__init__(*args, **kwargs)
        self.queues = queues
        self.fields["queue"].widget = forms.Select(choices=[(q, q) for q in queues])

    def clean_queue(self):
        try:
            queue = check_name("queue", self.cleaned_data["queue"])
        except InvalidInput as exc:
            raise forms.ValidationError(str(exc)) from exc
        if queue not in self.queues:
            raise forms.ValidationError(f"queue {queue!r} has no tasks; choose one of the list")
        return queue
