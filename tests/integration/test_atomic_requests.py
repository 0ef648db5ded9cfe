"""What docs/databases.md, "Enqueueing in a request", says a request's transaction does to an
enqueue, on real databases: rivet's queue on PostgreSQL ('default'), the app's rows on SQLite
('sqlite'), a view that enqueues and then raises. rivet.W012 warns of the first case."""

from __future__ import annotations

import pytest
from django.db import connections, transaction
from django.test import Client, override_settings
from django.urls import path

import rivet
from rivet.models import Task

pytestmark = pytest.mark.django_db(databases=["default", "sqlite"], transaction=True)


def enqueue_then_raise(request):
    rivet.enqueue("noop", {"order": 1}, queue="orders", idem_key="order-1")
    raise RuntimeError("the view fails after its enqueue")


def enqueue_on_commit_then_raise(request):
    transaction.on_commit(
        lambda: rivet.enqueue("noop", {"order": 2}, queue="orders", idem_key="order-2"),
        using="sqlite",
    )
    raise RuntimeError("the view fails after it asked for the enqueue")


def enqueue_on_commit(request):
    from django.http import HttpResponse

    transaction.on_commit(
        lambda: rivet.enqueue("noop", {"order": 3}, queue="orders", idem_key="order-3"),
        using="sqlite",
    )
    return HttpResponse("ok")


urlpatterns = [
    path("plain/", enqueue_then_raise),
    path("on-commit-raises/", enqueue_on_commit_then_raise),
    path("on-commit/", enqueue_on_commit),
]


@pytest.fixture
def atomic(monkeypatch):
    def turn_on(*aliases: str) -> None:
        for alias in aliases:
            monkeypatch.setitem(connections.settings[alias], "ATOMIC_REQUESTS", True)

    return turn_on


def call(url: str) -> int:
    with override_settings(ROOT_URLCONF=__name__):
        return Client(raise_request_exception=False).get(url).status_code


def queued() -> list[str]:
    return sorted(Task.objects.using("default").values_list("idem_key", flat=True))


def test_atomic_requests_on_another_alias_leaves_the_task_behind(atomic):
    """The report's case, and rivet.W012's: the rows roll back, the task stays."""
    atomic("sqlite")
    assert call("/plain/") == 500
    assert queued() == ["order-1"]


def test_atomic_requests_on_the_queue_s_alias_rolls_the_task_back(atomic):
    atomic("sqlite", "default")
    assert call("/plain/") == 500
    assert queued() == []


def test_an_enqueue_on_commit_of_the_rows_alias_follows_their_commit(atomic):
    atomic("sqlite")
    assert call("/on-commit-raises/") == 500
    assert queued() == []
    assert call("/on-commit/") == 200
    assert queued() == ["order-3"]
