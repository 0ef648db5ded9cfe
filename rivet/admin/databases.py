"""Which database an admin page reads: the ``database`` selector of rivet's changelists.

Each database that holds queues (``rivet.routing.queue_aliases``) numbers its own tasks, so a
page shows the rows of one alias: ``?database=ALIAS`` (a filter shown only when queues live on
more than one database), else RIVET['DATABASE_ALIAS']. A change page opened from a changelist
reads the alias the changelist's filters carry; an action acts on its queryset's alias, through
the store of that alias.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.http import QueryDict

from rivet.conf import rivet_settings
from rivet.routing import queue_aliases

PARAM = "database"


def admin_alias(request) -> str:
    """The alias the page reads: ``?database=`` when it holds queues, else DATABASE_ALIAS."""
    value = request.GET.get(PARAM)
    if value is None:
        value = QueryDict(request.GET.get("_changelist_filters", "")).get(PARAM)
    return value if value in queue_aliases() else rivet_settings.DATABASE_ALIAS


def database_query(alias: str) -> str:
    """The query string that keeps a page on ``alias`` ('' for DATABASE_ALIAS)."""
    return "" if alias == rivet_settings.DATABASE_ALIAS else "?" + urlencode({PARAM: alias})


class DatabaseFilter(admin.SimpleListFilter):
    """The database a changelist reads; one choice per alias, none when there is one alias."""

    title = "database"
    parameter_name = PARAM

    def lookups(self, request, model_admin):
        aliases = queue_aliases()
        return [(alias, alias) for alias in aliases] if len(aliases) > 1 else []

    def choices(self, changelist):
        current = self.value() or rivet_settings.DATABASE_ALIAS
        for alias, title in self.lookup_choices:
            yield {
                "selected": alias == current,
                "query_string": changelist.get_query_string({self.parameter_name: alias}),
                "display": title,
            }

    def queryset(self, request, queryset):
        value = self.value()
        if value is not None and value not in queue_aliases():
            raise IncorrectLookupParameters(
                f"database {value!r} holds no queues; expected one of {', '.join(queue_aliases())}"
            )
        return queryset  # the alias itself is chosen by the admin's get_queryset (admin_alias)
