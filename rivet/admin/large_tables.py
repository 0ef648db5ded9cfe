"""What keeps the task changelists fast on a table of millions of rows (on PostgreSQL).

- ``EstimatedCountPaginator``: counts exactly up to ``EXACT_COUNT_LIMIT`` rows, then takes the
  planner's estimate (``pg_class.reltuples`` unfiltered, EXPLAIN's row estimate filtered)
  instead of a COUNT(*) over the whole match on every page.
- ``TaskQuerySet.datetimes``: the date hierarchy's distinct years, months or days found by one
  index probe each (a loose index scan on created_at) instead of a DISTINCT over every row.
- ``QueueFilter`` and ``KindFilter``: the choices a filter offers, by a loose index scan.

On SQLite (the embedded store, small tables) each falls back to Django's plain query.
"""

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib import admin
from django.core.exceptions import EmptyResultSet, FullResultSet
from django.core.paginator import Paginator
from django.db import connections, models
from django.utils import timezone

from rivet.models import Task
from rivet.stores.sqlfile import load_queries
from rivet.values import TaskState

QUERIES = load_queries(Path(__file__).with_name("postgres.sql"))

#: Up to this many matching rows a changelist shows the exact count; past it, an estimate.
EXACT_COUNT_LIMIT = 10_000
BUCKET_STEPS = {"year": "1 year", "month": "1 month", "day": "1 day"}


def is_postgres(alias: str) -> bool:
    return connections[alias].vendor == "postgresql"


def fetch(alias: str, query: str, params: Any = None) -> list[tuple]:
    with connections[alias].cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall()


class EstimatedCountPaginator(Paginator):
    """A paginator whose count is exact for small results and PostgreSQL's estimate past them."""

    #: True when ``count`` is an estimate; the pagination template then says "about".
    estimated = False

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if not isinstance(queryset, models.QuerySet) or not is_postgres(queryset.db):
            return super().count
        exact = queryset[: EXACT_COUNT_LIMIT + 1].count()
        if exact <= EXACT_COUNT_LIMIT:
            return exact
        self.estimated = True
        return max(self._estimate(queryset), exact)

    @staticmethod
    def _estimate(queryset: models.QuerySet) -> int:
        if not queryset.query.has_filters():
            (rows,) = fetch(queryset.db, QUERIES["table_estimate"])
            if rows[0] > 0:
                return int(rows[0])
        # EXPLAIN plans the query without running it; its top node carries the row estimate.
        sql, params = queryset.order_by().values("pk").query.sql_with_params()
        (plan,) = fetch(queryset.db, f"EXPLAIN (FORMAT JSON) {sql}", params)
        document = plan[0] if not isinstance(plan[0], str) else json.loads(plan[0])
        return int(document[0]["Plan"]["Plan Rows"])


class TaskQuerySet(models.QuerySet):
    """Task rows, with a date hierarchy that walks the created_at index on PostgreSQL."""

    def datetimes(self, field_name, kind, order="ASC", tzinfo=None):
        if not self._loose_scan_fits(field_name, kind, order, tzinfo):
            return super().datetimes(field_name, kind, order=order, tzinfo=tzinfo)
        compiler = self.query.get_compiler(using=self.db)
        try:
            where, params = compiler.compile(self.query.where)
        except FullResultSet:
            where, params = "TRUE", []
        except EmptyResultSet:
            return []
        zone = timezone.get_current_timezone_name()
        query = QUERIES["date_buckets"].format(where=where)
        rows = fetch(self.db, query, [kind, zone, BUCKET_STEPS[kind], *params, *params])
        return [timezone.localtime(bucket) for (bucket,) in rows]

    def _loose_scan_fits(self, field_name: str, kind: str, order: str, tzinfo: Any) -> bool:
        """Only the plain case: created_at, one table, ascending, aware, the current zone."""
        return (
            field_name == "created_at"
            and kind in BUCKET_STEPS
            and order == "ASC"
            and tzinfo is None
            and settings.USE_TZ
            and is_postgres(self.db)
            and set(self.query.alias_map) <= {self.model._meta.db_table}
        )


def distinct_values(alias: str, column: str) -> list[str]:
    """The distinct queues or kinds of the task table, in order."""
    if is_postgres(alias):
        return [row[0] for row in fetch(alias, QUERIES[f"{column}_names"])]
    values = Task.objects.using(alias).order_by(column).values_list(column, flat=True)
    return list(values.distinct())


class DistinctValuesFilter(admin.SimpleListFilter):
    """A filter on one column whose choices come from a loose index scan on PostgreSQL."""

    column = ""

    def lookups(self, request, model_admin):
        alias = model_admin.get_queryset(request).db
        return [(value, value) for value in distinct_values(alias, self.column)]

    def queryset(self, request, queryset):
        value = self.value()
        return queryset if value is None else queryset.filter(**{self.column: value})


class QueueFilter(DistinctValuesFilter):
    title = "queue"
    parameter_name = column = "queue"


class KindFilter(DistinctValuesFilter):
    title = "kind"
    parameter_name = column = "kind"

    def queryset(self, request, queryset):
        value = self.value()
        if value is None:
            return queryset
        # Naming every state lets PostgreSQL probe the (state, kind) index once per state.
        return queryset.filter(state__in=TaskState.values, kind=value)
