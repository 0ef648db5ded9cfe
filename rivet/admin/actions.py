"""What rivet's admin actions share: a bounded selection, a confirmation page, a report.

An action acts through the Store, on at most ``MAX_ACTION_ROWS`` rows that its confirmation
page lists one by one; only a POST carrying ``confirm=yes`` from that page changes anything.
Afterwards ``message_user`` says what was done and, for every id left alone, why: in the words
of rivet.operations, which acted on it, as ``rivet_dlq`` and the HTTP API say them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.contrib.admin import helpers
from django.template.response import TemplateResponse

from rivet.admin.databases import admin_alias, database_query
from rivet.models import Task
from rivet.operations.outcome import Outcome

#: Most rows one action acts on: the confirmation page lists each of them.
MAX_ACTION_ROWS = 1000


if TYPE_CHECKING:  # a mixin of ModelAdmin: type-check it as one
    from django.contrib.admin import ModelAdmin

    _AdminBase = ModelAdmin[Any]
else:
    _AdminBase = object


class ConfirmedActions(_AdminBase):
    """A ModelAdmin mixin for actions that ask first and report what they left alone."""

    def rows_named(self, count: int) -> str:
        """``count`` rows of this page, in words: '1 task', '3 dead letters'."""
        opts = self.model._meta
        return f"{count} {opts.verbose_name if count == 1 else opts.verbose_name_plural}"

    def chosen(self, queryset) -> list[Task] | None:
        """The selected rows in id order, or None when there are too many for one action."""
        tasks = list(queryset.order_by("id")[: MAX_ACTION_ROWS + 1])
        return None if len(tasks) > MAX_ACTION_ROWS else tasks

    def confirmed(self, request) -> bool:
        return request.POST.get("confirm") == "yes"

    def confirm(self, request, verb: str, tasks: Sequence[Task] | None, **context):
        """The confirmation page listing ``tasks``; an error message when there are too many."""
        if tasks is None:
            self.message_user(
                request,
                f"Select at most {self.rows_named(MAX_ACTION_ROWS)} for one {verb}; narrow the "
                "list with a filter or a search first. Nothing was changed.",
                messages.ERROR,
            )
            return None
        opts = self.model._meta
        context = {
            **self.admin_site.each_context(request),
            "title": f"{verb.capitalize()} {self.rows_named(len(tasks))}?",
            "opts": opts,
            "tasks": tasks,
            "action_name": f"{verb}_selected",
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "database_query": database_query(admin_alias(request)),
            **context,
        }
        template = f"admin/{opts.app_label}/{opts.model_name}/confirm_{verb}.html"
        return TemplateResponse(request, template, context)

    def gone(self, request, tasks: list[Task]) -> list[int]:
        """Ids the user selected that the action's queryset no longer held when it ran."""
        chosen = {task.id for task in tasks}
        selected = {
            int(pk) for pk in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME) if pk.isdigit()
        }
        return sorted(selected - chosen)

    def confirmed_ids(self, request, tasks: list[Task]) -> list[int]:
        """Every id the user confirmed, in id order: those the action's queryset still holds,
        and those it no longer holds (``gone``), which the operation looks up and refuses."""
        return sorted({task.id for task in tasks} | set(self.gone(request, tasks)))

    def report_refused(self, request, verb: str, refused: Sequence[Outcome]) -> None:
        """One warning naming every refusal, each in the operation's own words."""
        if refused:
            reasons = "; ".join(outcome.message for outcome in refused)
            self.message_user(request, f"Not {verb}: {reasons}.", messages.WARNING)
