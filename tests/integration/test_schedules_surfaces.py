"""Schedules through the admin (Django's test client) and the HTTP API (DRF's client)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from rivet.models import Schedule, Task
from rivet.schedules.scheduler import run_due, sync_code_schedules
from rivet.stores import store_for_alias
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:rivet_schedule_changelist")
ADD = reverse("admin:rivet_schedule_add")
ALL = ["rivet.view_schedule", "rivet.add_schedule", "rivet.change_schedule"]
ALL += ["rivet.run_schedule", "rivet.view_task"]


def change_url(schedule: Schedule) -> str:
    return reverse("admin:rivet_schedule_change", args=[schedule.pk])


def form(**fields) -> dict:
    base = {
        "name": "hourly-report",
        "kind": "noop",
        "enabled": "on",
        "cron": "0 * * * *",
        "timezone": "Europe/Berlin",
        "missed": "latest",
        "max_missed": "100",
        "queue": "",
        "priority": "",
        "payload": '{"region": "eu"}',
    }
    return {**base, **fields}


@pytest.fixture
def operator(client):
    client.force_login(UserFactory(permissions=ALL))
    return client


def code_schedule() -> Schedule:
    definition = {
        "name": "from-code",
        "kind": "noop",
        "cron": "*/5 * * * *",
        "timezone": "UTC",
        "queue": None,
        "priority": None,
        "payload": {},
        "missed": "latest",
        "max_missed": 100,
    }
    sync_code_schedules([definition], alias="default")
    return Schedule.objects.get(name="from-code")


def test_an_operator_makes_a_schedule_and_the_list_shows_its_next_run(operator):
    response = operator.post(ADD, form())
    assert response.status_code == 302, response.content.decode()[:2000]
    schedule = Schedule.objects.get(name="hourly-report")
    assert (schedule.source, schedule.payload) == ("database", {"region": "eu"})
    page = operator.get(CHANGELIST).content.decode()
    assert "hourly-report" in page and ("+01:00" in page or "+02:00" in page)  # next run


def test_a_bad_expression_or_payload_is_refused_on_the_form(operator):
    response = operator.post(ADD, form(cron="61 * * * *"))
    assert response.status_code == 200 and "is not valid" in response.content.decode()
    response = operator.post(ADD, form(payload='{"scheduled_at": 1}'))
    assert "each tick sets it" in response.content.decode()
    assert not Schedule.objects.exists()


@pytest.mark.parametrize("depth", [101, 5000])
def test_a_payload_nested_past_the_limit_is_a_form_error(operator, depth):
    """5000 levels is past the parser's stack: refused before it runs, not a 500."""
    payload = '{"tree": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"
    response = operator.post(ADD, form(payload=payload))
    assert response.status_code == 200
    assert f"nests arrays and objects {depth} levels deep" in response.content.decode()
    assert not Schedule.objects.exists()


def test_editing_the_expression_restarts_it_from_now_and_keeps_the_scheduler_s_state(operator):
    operator.post(ADD, form())
    long_ago = timezone.now() - timedelta(days=2)
    Schedule.objects.filter(name="hourly-report").update(since=long_ago, skipped_ticks=7)
    schedule = Schedule.objects.get(name="hourly-report")
    response = operator.post(change_url(schedule), form(cron="30 * * * *"))
    assert response.status_code == 302
    schedule.refresh_from_db()
    assert schedule.cron == "30 * * * *" and schedule.since > long_ago
    assert schedule.skipped_ticks == 7  # an edit never writes the scheduler's state


def test_a_code_schedule_is_read_only_but_can_be_paused(operator):
    schedule = code_schedule()
    page = operator.get(change_url(schedule)).content.decode()
    assert 'name="cron"' not in page and 'name="enabled"' in page
    assert (
        operator.get(reverse("admin:rivet_schedule_delete", args=[schedule.pk])).status_code == 403
    )
    operator.post(CHANGELIST, {"action": "pause", "_selected_action": [schedule.pk]})
    schedule.refresh_from_db()
    assert not schedule.enabled and schedule.next_tick_at is None


def test_run_now_from_the_admin_enqueues_one_task_and_needs_its_permission(operator, client):
    schedule = code_schedule()
    operator.post(CHANGELIST, {"action": "run_now", "_selected_action": [schedule.pk]})
    assert Task.objects.filter(kind="noop").count() == 1
    client.force_login(UserFactory(permissions=["rivet.view_schedule", "rivet.change_schedule"]))
    page = client.get(CHANGELIST).content.decode()
    assert 'value="run_now"' not in page and 'value="pause"' in page


def api(*permissions: str) -> APIClient:
    client = APIClient()
    client.force_login(UserFactory(permissions=list(permissions)))
    return client


def test_the_api_lists_and_acts_on_schedules_under_the_permission_floor():
    past = timezone.now() - timedelta(seconds=3)
    Schedule.objects.create(
        name="s", kind="noop", cron="* * * * * *", missed="all", since=past, next_tick_at=past
    )
    run_due(store_for_alias("default"), alias="default")
    reader = api("rivet.view_schedule")
    listed = reader.get("/rivet/schedules/").json()
    assert [r["name"] for r in listed] == ["s"]
    assert listed[0]["last_tick_at"] and listed[0]["next_run"] and listed[0]["last_task_id"]
    assert reader.get("/rivet/schedules/nope/").status_code == 404
    assert reader.post("/rivet/schedules/s/pause/").status_code == 403
    assert reader.post("/rivet/schedules/s/run/").status_code == 403
    assert APIClient().get("/rivet/schedules/").status_code in (401, 403)

    operator = api("rivet.view_schedule", "rivet.change_schedule", "rivet.run_schedule")
    paused = operator.post("/rivet/schedules/s/pause/").json()
    assert (paused["enabled"], paused["next_run"]) == (False, None)
    assert operator.post("/rivet/schedules/s/resume/").json()["enabled"] is True
    before = Task.objects.count()
    ran = operator.post("/rivet/schedules/s/run/").json()
    assert ran["schedule"] == "s" and Task.objects.count() == before + 1
    assert Task.objects.get(pk=ran["task_id"]).payload["scheduled_at"]


def test_a_kind_no_worker_would_run_is_refused_on_the_form(operator):
    response = operator.post(ADD, form(kind="no.such.kind"))
    assert response.status_code == 200 and "unknown job kind" in response.content.decode()
    assert not Schedule.objects.exists()
