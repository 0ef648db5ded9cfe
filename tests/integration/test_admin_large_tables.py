"""The admin's big-table parts on small data: each answer equals the plain query's answer.

The loose index scans (queues, kinds, date buckets) must list exactly what a DISTINCT over the
table lists; the paginator must count exactly below its limit and estimate only above it.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.core.paginator import Paginator
from django.db import connections
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from rivet.admin import large_tables
from rivet.admin.large_tables import EstimatedCountPaginator, TaskQuerySet, distinct_values
from rivet.admin.overview import format_age, queue_overview
from rivet.models import Task
from rivet.stores import store_for_alias
from rivet.stores.postgres import PostgresStore
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db(databases=["default", "sqlite"])

STAMPS = [
    datetime(2025, 12, 31, 23, 30, tzinfo=UTC),
    datetime(2026, 1, 1, 0, 30, tzinfo=UTC),
    datetime(2026, 1, 1, 9, 0, tzinfo=UTC),
    datetime(2026, 3, 15, 12, 0, tzinfo=UTC),
    datetime(2026, 3, 31, 23, 59, 59, tzinfo=UTC),
]


def tasks_at(alias: str, stamps=STAMPS) -> None:
    for n, stamp in enumerate(stamps):
        Task.objects.using(alias).create(
            queue=f"q{n % 2}", kind=f"k{n % 3}", state=("pending", "dead")[n % 2], created_at=stamp
        )


def plain(queryset):
    return TaskQuerySet(model=Task, query=queryset.query.chain(), using=queryset.db)


@pytest.mark.parametrize("alias", ["default", "sqlite"])
@pytest.mark.parametrize("zone", ["UTC", "Europe/Paris", "America/New_York"])
@pytest.mark.parametrize("kind", ["year", "month", "day"])
def test_date_buckets_equal_djangos_distinct_dates(alias, zone, kind):
    tasks_at(alias)
    with override_settings(TIME_ZONE=zone):
        queryset = plain(Task.objects.using(alias).all())
        expected = list(Task.objects.using(alias).datetimes("created_at", kind))
        with CaptureQueriesContext(connections[alias]) as queries:
            assert list(queryset.datetimes("created_at", kind)) == expected
        loose = any("WITH RECURSIVE unit" in q["sql"] for q in queries.captured_queries)
        assert loose == (alias == "default")  # the index walk on PostgreSQL, DISTINCT on SQLite
        dead = queryset.filter(state="dead")
        expected = list(
            Task.objects.using(alias).filter(state="dead").datetimes("created_at", kind)
        )
        assert list(dead.datetimes("created_at", kind)) == expected


def test_date_buckets_of_an_empty_match_are_empty():
    tasks_at("default")
    queryset = plain(Task.objects.filter(kind="nothing"))
    assert list(queryset.datetimes("created_at", "month")) == []
    assert list(plain(Task.objects.none()).datetimes("created_at", "month")) == []


@pytest.mark.parametrize("alias", ["default", "sqlite"])
def test_distinct_queues_and_kinds_equal_a_distinct_query(alias):
    tasks_at(alias)
    for column in ("queue", "kind"):
        expected = sorted(set(Task.objects.using(alias).values_list(column, flat=True)))
        assert distinct_values(alias, column) == expected
    Task.objects.using(alias).all().delete()
    assert distinct_values(alias, "queue") == distinct_values(alias, "kind") == []


def test_the_paginator_counts_exactly_up_to_its_limit_then_estimates(monkeypatch):
    monkeypatch.setattr(large_tables, "EXACT_COUNT_LIMIT", 5)
    TaskFactory.create_batch(5)
    exact = EstimatedCountPaginator(Task.objects.order_by("id"), 2)
    assert (exact.count, exact.estimated) == (5, False)
    TaskFactory.create_batch(3, kind="other")
    estimated = EstimatedCountPaginator(Task.objects.order_by("id"), 2)
    assert estimated.count >= 6 and estimated.estimated
    filtered = EstimatedCountPaginator(Task.objects.filter(kind="other").order_by("id"), 2)
    assert (filtered.count, filtered.estimated) == (3, False)


@pytest.mark.django_db(databases=["default", "sqlite"])
def test_on_sqlite_the_paginator_counts_exactly(monkeypatch):
    monkeypatch.setattr(large_tables, "EXACT_COUNT_LIMIT", 1)
    Task.objects.using("sqlite").create(queue="q", kind="k")
    Task.objects.using("sqlite").create(queue="q", kind="k")
    paginator = EstimatedCountPaginator(Task.objects.using("sqlite").order_by("id"), 1)
    assert (paginator.count, paginator.estimated) == (2, False)
    assert paginator.count == Paginator(Task.objects.using("sqlite").order_by("id"), 1).count


def test_the_overview_agrees_with_the_stores_queue_stats_and_caps_done(monkeypatch):
    TaskFactory.create_batch(2, queue="mail", runnable=True)
    TaskFactory.create_batch(3, queue="mail", done=True)
    TaskFactory(queue="mail", dead=True)
    TaskFactory(queue="sms", dead=True)
    store = store_for_alias("default")
    for row in queue_overview("default"):
        stats = store.queue_stats(row.queue)
        assert (row.ready, row.leased, row.delayed, row.done, row.dead) == (
            stats.ready,
            stats.leased,
            stats.delayed,
            stats.done,
            stats.dead,
        )
    monkeypatch.setattr(PostgresStore, "done_count_limit", 2)
    (mail, _) = queue_overview("default")
    assert mail.done_estimated and mail.done >= 3 and mail.done_text == f"~{mail.done}"


@pytest.mark.parametrize(
    ("secs", "shown"),
    [
        (None, "-"),
        (0.04, "0.0s"),
        (4.25, "4.2s"),
        (185, "3m 5s"),
        (7800, "2h 10m"),
        (277_200, "3d 5h"),
    ],
)
def test_ages_read_as_an_operator_reads_them(secs, shown):
    assert format_age(secs) == shown
