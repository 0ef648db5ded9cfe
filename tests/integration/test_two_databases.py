"""Queues on two PostgreSQL clusters: routing, the worker, stats, API, admin, migrations.

The second cluster is ``tests.two_clusters``'s (a throwaway cluster started for the run, as the
alias ``queues_b``); the queues of ``TWO_DATABASES`` live there, every other queue on 'default'.
"""

from __future__ import annotations

import importlib
import json
from datetime import timedelta

import psycopg
import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

import rivet
from rivet.errors import MixedDatabases, RivetConfigError
from rivet.metrics import queue_exposition
from rivet.models import Task
from rivet.routing import alias_for_queue, queue_aliases
from rivet.schedules.models import Schedule
from rivet.schedules.scheduler import run_due
from rivet.stores import queue_stores, store_for_alias
from rivet.values import CancelOutcome, TaskState
from rivet.worker import Worker, WorkerConfig
from rivet.worker.group import WorkerGroup
from tests.factories import UserFactory
from tests.processes import child_environ, manage, postgres_url
from tests.two_clusters import SECOND_ALIAS, TWO_DATABASES, register_alias

pytestmark = pytest.mark.django_db(databases=["default", SECOND_ALIAS], transaction=True)
ROUTER = "rivet.routers.QueueRouter"


@pytest.fixture
def routed(settings, second_database):
    """RIVET['QUEUE_DATABASES'] sends TWO_DATABASES's queues to the second cluster."""
    settings.RIVET = {**settings.RIVET, "QUEUE_DATABASES": TWO_DATABASES}
    settings.DATABASE_ROUTERS = [ROUTER]
    return second_database


def rows(alias: str, **filters) -> list[Task]:
    return list(Task.objects.using(alias).filter(**filters).order_by("id"))


class UrgentRouter:
    """A router with the db_for_queue hook: 'urgent' lives on the second database."""

    def db_for_queue(self, queue):
        return SECOND_ALIAS if queue == "urgent" else None

    def queue_databases(self):
        return [SECOND_ALIAS]


class DefaultOnlyRouter:
    """A router that keeps rivet's tables on 'default' alone (as a host's router might)."""

    def allow_migrate(self, db, app_label, **hints):
        return db == "default" if app_label == "rivet" else None


# -- routing and the producer -----------------------------------------------------------------


def test_enqueue_writes_each_task_on_the_database_of_its_queue(routed):
    mail = rivet.enqueue("noop", {"to": "a"}, queue="mail")
    demo = rivet.enqueue("noop", queue="demo")
    assert [t.id for t in rows(SECOND_ALIAS, queue="mail")] == [mail.task_id]
    assert [t.id for t in rows("default", queue="demo")] == [demo.task_id]
    assert rows("default", queue="mail") == [] and rows(SECOND_ALIAS, queue="demo") == []
    # A duplicate key is found where the queue lives.
    again = rivet.enqueue("noop", {"to": "a"}, queue="mail", idem_key="k1")
    assert not again.duplicate
    assert rivet.enqueue("noop", {"to": "a"}, queue="mail", idem_key="k1").duplicate


def test_a_job_definition_enqueue_is_routed_and_an_explicit_using_wins(routed):
    from chaos_project.jobs import noop

    routed_id = noop.enqueue(queue="mail").task_id
    pinned_id = noop.enqueue(queue="mail", using="default").task_id
    assert [t.id for t in rows(SECOND_ALIAS)] == [routed_id]
    assert [t.id for t in rows("default")] == [pinned_id]


def test_rivet_enqueue_writes_on_the_database_of_the_queue(routed, capsys):
    call_command("rivet_enqueue", "--kind", "noop", "--queue", "mail")
    (task,) = rows(SECOND_ALIAS)
    assert capsys.readouterr().out.strip() == f"enqueued {task.id}"
    call_command("rivet_enqueue", "--kind", "noop", "--queue", "mail", "--database", "default")
    assert [t.queue for t in rows("default")] == ["mail"]


def test_a_router_hook_is_asked_first_and_lists_its_databases(settings, second_database):
    settings.DATABASE_ROUTERS = [f"{__name__}.UrgentRouter", ROUTER]
    settings.RIVET = {**settings.RIVET, "QUEUE_DATABASES": {"urgent": "default"}}
    assert alias_for_queue("urgent") == SECOND_ALIAS
    assert alias_for_queue("other") == "default"
    assert queue_aliases() == ["default", SECOND_ALIAS]
    task_id = rivet.enqueue("noop", queue="urgent").task_id
    assert [t.id for t in rows(SECOND_ALIAS)] == [task_id]


def test_enqueue_many_on_one_database_is_routed_and_a_mixed_batch_is_refused(routed):
    same = rivet.enqueue_many(
        [{"kind": "noop", "queue": "mail"}, {"kind": "noop", "queue": "mail_low"}]
    )
    assert [t.id for t in rows(SECOND_ALIAS)] == [r.task_id for r in same]
    with pytest.raises(MixedDatabases, match=r"item 1: queue 'demo' lives on the database "):
        rivet.enqueue_many([{"kind": "noop", "queue": "mail"}, {"kind": "noop", "queue": "demo"}])
    assert len(rows(SECOND_ALIAS)) == 2 and rows("default") == []  # nothing written
    pinned = rivet.enqueue_many(
        [{"kind": "noop", "queue": "mail"}, {"kind": "noop", "queue": "demo"}], using="default"
    )
    assert [t.id for t in rows("default")] == [r.task_id for r in pinned]


def test_a_streamed_batch_that_turns_to_another_database_late_writes_nothing(routed):
    # 300 items: the store copies the first while later ones are validated; item 250's queue
    # lives on the default database, so the check fails inside the COPY and all rolls back.
    items = [{"kind": "noop", "queue": "mail", "payload": n} for n in range(300)]
    items[250] = {"kind": "noop", "queue": "demo"}
    with pytest.raises(MixedDatabases, match=r"item 250: queue 'demo' lives on the database "):
        rivet.enqueue_many(items)
    assert rows(SECOND_ALIAS) == [] and rows("default") == []


def test_the_django_tasks_backend_routes_by_queue_and_reads_results_back(routed, settings):
    settings.TASKS = {
        "default": {
            "BACKEND": "rivet.backends.RivetBackend",
            "QUEUES": ["default", "emails", "mail"],
        }
    }
    tasks = importlib.import_module("tests.tasks_for_backend")
    result = tasks.add.using(queue_name="mail").enqueue(2, 3)
    (row,) = rows(SECOND_ALIAS)
    assert result.id == f"{row.id}@{SECOND_ALIAS}"
    home = tasks.add.enqueue(1, 1)
    assert home.id == str(rows("default")[0].id)
    drain(["mail"], SECOND_ALIAS)
    assert tasks.add.get_backend().get_result(result.id).return_value == 5


def drain(queues: list[str], alias: str) -> None:
    config = WorkerConfig(queues=tuple(queues), once=True, lease_ttl=30, concurrency=2)
    assert Worker(config, store=store_for_alias(alias)).run().exit_code == 0


def test_a_schedule_tick_is_enqueued_on_the_database_of_its_queue(routed):
    past = timezone.now().replace(microsecond=0) - timedelta(seconds=3)
    Schedule.objects.create(
        name="digest", kind="noop", cron="* * * * * *", queue="mail", since=past, next_tick_at=past
    )
    done = run_due(store_for_alias("default"), alias="default")
    assert done.enqueued == 1 and done.failed == 0  # the latest missed tick (the default policy)
    (tick,) = rows(SECOND_ALIAS)
    assert tick.idem_key.startswith("rivet.tick:digest:") and rows("default") == []


# -- the worker -------------------------------------------------------------------------------


def test_a_worker_group_runs_the_tasks_of_both_databases_to_done(routed):
    ids = {
        "default": [rivet.enqueue("noop", queue="demo").task_id for _ in range(3)],
        SECOND_ALIAS: [rivet.enqueue("noop", queue="mail").task_id for _ in range(3)],
    }
    group = WorkerGroup(
        [
            Worker(
                WorkerConfig(queues=(queue,), once=True, lease_ttl=30, concurrency=2),
                store=store_for_alias(alias),
            )
            for queue, alias in (("demo", "default"), ("mail", SECOND_ALIAS))
        ]
    )
    stats = group.run()
    assert (stats.exit_code, stats.acked) == (0, 6)
    for alias, task_ids in ids.items():
        assert [(t.id, t.state) for t in rows(alias)] == [(i, TaskState.DONE) for i in task_ids]


# -- stats, metrics, API, admin ---------------------------------------------------------------


def test_stats_metrics_and_rivet_stats_report_each_database(routed, capsys):
    rivet.enqueue("noop", queue="mail")
    rivet.enqueue("noop", queue="demo")
    assert [alias for alias, _ in queue_stores()] == ["default", SECOND_ALIAS]
    text = queue_exposition(queue_stores()).decode()
    assert f'rivet_queue_ready{{database="{SECOND_ALIAS}",queue="mail"}} 1.0' in text
    assert 'rivet_queue_ready{database="default",queue="demo"} 1.0' in text
    call_command("rivet_stats", "--queue", "mail", "--json")
    one = json.loads(capsys.readouterr().out)
    assert (one["queue"], one["database"], one["ready"]) == ("mail", SECOND_ALIAS, 1)
    call_command("rivet_stats", "--all", "--json")
    every = {(q["database"], q["queue"]): q["ready"] for q in json.loads(capsys.readouterr().out)}
    assert every == {("default", "demo"): 1, (SECOND_ALIAS, "mail"): 1}
    call_command("rivet_stats", "--queue", "mail")
    assert f"database          {SECOND_ALIAS}" in capsys.readouterr().out


def api_client() -> APIClient:
    client = APIClient()
    client.force_login(UserFactory(is_superuser=True))
    return client


def test_the_api_enqueues_by_queue_and_addresses_tasks_by_database(routed):
    api = api_client()
    created = api.post("/rivet/tasks/", {"kind": "noop", "queue": "mail"}, format="json")
    assert created.status_code == 201, created.json()
    body = created.json()
    assert body["database"] == SECOND_ALIAS and rows(SECOND_ALIAS)[0].id == body["id"]
    found = api.get(f"/rivet/tasks/{body['id']}/", {"database": SECOND_ALIAS})
    assert (found.status_code, found.json()["queue"]) == (200, "mail")
    assert api.get(f"/rivet/tasks/{body['id']}/").status_code == 404  # 'default' has none
    bad = api.get(f"/rivet/tasks/{body['id']}/", {"database": "nowhere"}).json()
    assert bad["code"] == "invalid_input" and "'nowhere'" in bad["database"][0]
    mixed = api.post(
        "/rivet/tasks/bulk/",
        {"tasks": [{"kind": "noop", "queue": "mail"}, {"kind": "noop", "queue": "demo"}]},
        format="json",
    )
    assert mixed.status_code == 400 and "one batch per database" in mixed.json()["detail"]
    bulk = api.post(
        "/rivet/tasks/bulk/", {"tasks": [{"kind": "noop", "queue": "mail"}]}, format="json"
    )
    assert bulk.json()["results"][0]["task"]["database"] == SECOND_ALIAS
    empty = api.post("/rivet/tasks/bulk/", {"tasks": []}, format="json")
    assert (empty.status_code, empty.json()) == (200, {"results": []})
    api.post("/rivet/tasks/", {"kind": "noop", "queue": "demo"}, format="json")
    listed = {(q["database"], q["queue"]): q["ready"] for q in api.get("/rivet/queues/").json()}
    assert listed == {("default", "demo"): 1, (SECOND_ALIAS, "mail"): 2}
    assert api.get("/rivet/queues/mail/").json()["database"] == SECOND_ALIAS
    cancel = api.post(f"/rivet/tasks/{body['id']}/cancel/?database={SECOND_ALIAS}")
    assert (cancel.status_code, cancel.json()["outcome"]) == (200, "cancelled")
    assert Task.objects.using(SECOND_ALIAS).get(pk=body["id"]).state == TaskState.DEAD


def test_the_admin_lists_and_cancels_the_tasks_of_the_database_it_is_asked_for(routed, client):
    client.force_login(UserFactory(is_superuser=True))
    mail = rivet.enqueue("noop", {"n": "mail-task"}, queue="mail").task_id
    rivet.enqueue("noop", {"n": "demo-task"}, queue="demo")
    changelist = "/admin/rivet/task/"
    home = client.get(changelist).content.decode()
    assert "demo" in home and ">mail<" not in home
    there = client.get(changelist, {"database": SECOND_ALIAS}).content.decode()
    assert ">mail<" in there and ">demo<" not in there
    assert client.get(changelist, {"database": "nowhere"}).status_code == 302  # ?e=1
    detail = client.get(f"/admin/rivet/task/{mail}/change/", {"database": SECOND_ALIAS})
    assert detail.status_code == 200 and "mail-task" in detail.content.decode()
    # A row's link from that changelist carries the filter in _changelist_filters.
    assert f"_changelist_filters=database%3D{SECOND_ALIAS}" in there
    linked = client.get(
        f"/admin/rivet/task/{mail}/change/", {"_changelist_filters": f"database={SECOND_ALIAS}"}
    )
    assert linked.status_code == 200 and "mail-task" in linked.content.decode()
    data = {"action": "cancel_selected", "_selected_action": [mail], "confirm": "yes"}
    client.post(f"{changelist}?database={SECOND_ALIAS}", data)
    (task,) = rows(SECOND_ALIAS)
    assert task.state == TaskState.DEAD
    assert rivet.cancel(task.id, using=SECOND_ALIAS) is CancelOutcome.FINISHED


# -- migrations and bad configuration -----------------------------------------------------------


def test_migrations_go_to_every_database_that_holds_queues_and_nowhere_else(second_database):
    """``migrate --database`` with QueueRouter, in a child with queues on 'queues_b' and none on
    the alias 'spare': rivet's tables land on the first only; other apps' on both."""
    holding = second_database.create_database("rivet_mig_b")
    spare = second_database.create_database("rivet_mig_spare")
    env = child_environ(
        postgres_url(),
        DJANGO_SETTINGS_MODULE="tests.settings_two_databases",
        SECOND_DATABASE_URL=holding,
        SPARE_DATABASE_URL=spare,
    )
    try:
        for alias in (SECOND_ALIAS, "spare"):
            done = manage("migrate", "--database", alias, "--no-input", env=env)
            assert done.returncode == 0, done.stderr
        assert {"rivet_task", "auth_user"} <= tables(holding)
        assert "auth_user" in tables(spare) and "rivet_task" not in tables(spare)
    finally:
        second_database.drop_database("rivet_mig_b")
        second_database.drop_database("rivet_mig_spare")


def tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        query = "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
        return {row[0] for row in conn.execute(query)}


def checks(ids: tuple[str, ...] = ("rivet.E007", "rivet.E008")):
    # No database: Django 6.1's run_checks() otherwise hands every alias to the model checks, and
    # the JSONField check then queries the SQLite alias, which these tests do not open.
    return [m for m in run_checks(databases=[]) if m.id in ids]


def test_a_queue_routed_to_an_unknown_alias_is_a_system_check_error_and_refused(settings):
    settings.RIVET = {**settings.RIVET, "QUEUE_DATABASES": {"mail": "nowhere"}}
    (error,) = checks()
    assert error.id == "rivet.E007"
    assert "sends queue 'mail' to 'nowhere', which is not in settings.DATABASES" in error.msg
    with pytest.raises(RivetConfigError, match=r"names the database alias 'nowhere'.*expected"):
        rivet.enqueue("noop", queue="mail")
    settings.RIVET = {**settings.RIVET, "QUEUE_DATABASES": ["mail"]}
    assert "must be a dict" in checks()[0].msg


def test_a_queue_on_a_database_rivet_cannot_run_on_is_refused(settings):
    settings.RIVET = {**settings.RIVET, "QUEUE_DATABASES": {"mail": "elsewhere"}}
    with register_alias("elsewhere", {"ENGINE": "django.db.backends.dummy"}):
        (error,) = checks()
        assert "whose vendor is 'unknown'; rivet's stores run on PostgreSQL or SQLite" in error.msg
        with pytest.raises(RivetConfigError, match="'elsewhere' is unknown; rivet stores run on"):
            rivet.enqueue("noop", queue="mail")


def test_queues_on_a_database_the_routers_keep_rivet_from_are_an_error(settings, routed):
    settings.DATABASE_ROUTERS = [f"{__name__}.DefaultOnlyRouter"]
    (error,) = checks()
    assert error.id == "rivet.E008" and f"'{SECOND_ALIAS}'" in error.msg
    assert "rivet.routers.QueueRouter" in error.hint
    settings.DATABASE_ROUTERS = [ROUTER, f"{__name__}.DefaultOnlyRouter"]
    assert checks() == []
