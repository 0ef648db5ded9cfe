"""Retention on PostgreSQL: `manage.py rivet_prune`, and the worker's periodic prune.

Rows are made old by moving their timestamps back (the server's clock is the only clock).
"""

from __future__ import annotations

import threading
import time
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from rivet.models import FencedWrite, Task
from rivet.stores.postgres import PostgresStore
from rivet.validation import build_spec
from rivet.values import Lease, Settled
from rivet.worker import Worker, WorkerConfig
from rivet.worker.prune import KEY_CAVEAT, Pruner
from tests.processes import child_environ, manage, postgres_url

HOUR = 3600.0


@pytest.fixture
def store():
    store = PostgresStore(using="default")
    yield store
    store.close()


def make_done(store: PostgresStore, queue: str, key: str | None = None) -> int:
    task_id = store.task_enqueue(build_spec(queue=queue, kind="noop", idem_key=key)).task_id
    (claimed,) = store.task_claim(queues=[queue], owner="w", limit=1, lease_ttl=60).claimed
    assert store.task_ack(claimed.lease, "ok") is Settled.ACKED
    return task_id


def make_dead(store: PostgresStore, queue: str) -> int:
    task_id = store.task_enqueue(build_spec(queue=queue, kind="noop", max_attempts=1)).task_id
    (claimed,) = store.task_claim(queues=[queue], owner="w", limit=1, lease_ttl=60).claimed
    assert store.task_bury(claimed.lease, "poison") is Settled.BURIED
    return task_id


def age_everything(secs: float) -> None:
    """Every task and fenced-write timestamp moves ``secs`` into the past."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE rivet_task SET updated_at = updated_at - make_interval(secs => %s), "
            "created_at = created_at - make_interval(secs => %s)",
            [secs, secs],
        )
        cursor.execute(
            "UPDATE rivet_fenced_write SET created_at = created_at - make_interval(secs => %s)",
            [secs],
        )


def prune_cmd(*args: str) -> str:
    out = StringIO()
    call_command("rivet_prune", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_dry_run_counts_and_deletes_nothing(store) -> None:
    done = [make_done(store, "demo") for _ in range(3)]
    store.task_fence(Lease(task_id=done[0], epoch=0, owner="gone"), "ack")
    age_everything(2 * HOUR)
    make_done(store, "demo")
    out = prune_cmd("--older-than", "1h", "--dry-run")
    assert out.strip() == (
        "would prune 3 done task(s) and 1 fenced-write record(s) older than 1h; "
        "nothing deleted (dry run)"
    )
    assert Task.objects.count() == 4
    assert FencedWrite.objects.count() == 1


@pytest.mark.django_db
def test_prune_deletes_old_done_tasks_and_fences_only(store) -> None:
    old = [make_done(store, "demo", key=f"k{n}") for n in range(5)]
    dead = make_dead(store, "demo")
    elsewhere = make_done(store, "other")
    store.task_fence(Lease(task_id=old[0], epoch=0, owner="gone"), "ack")
    waiting = store.task_enqueue(build_spec(queue="demo", kind="noop", delay=10 * HOUR)).task_id
    age_everything(2 * HOUR)
    recent = make_done(store, "demo")
    out = prune_cmd("--older-than", "90m", "--batch-size", "2", "--queue", "demo")
    assert KEY_CAVEAT in out
    assert (
        "pruned 5 done task(s) and 1 fenced-write record(s) older than 90m in queue demo, "
        "in batches of at most 2"
    ) in out
    left = set(Task.objects.values_list("id", flat=True))
    assert left == {dead, elsewhere, waiting, recent}
    assert FencedWrite.objects.count() == 0
    again = store.task_enqueue(build_spec(queue="demo", kind="noop", idem_key="k0"))
    assert not again.duplicate, "a pruned task's key is released"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--older-than", "soon"], "--older-than must be a duration such as 7d"),
        (["--older-than", "0"], "--older-than must be a duration"),
        (["--older-than=-5m"], "got '-5m'"),
        (["--older-than", "7d", "--batch-size", "0"], "--batch-size must be an integer from 1"),
        (["--older-than", "7d", "--queue", "bad queue"], "queue 'bad queue' may use only"),
        ([], "give --older-than (e.g. --older-than 30d) or set RIVET['RETENTION']"),
    ],
)
def test_bad_input_is_one_clear_error_with_exit_2(store, args, message) -> None:
    make_done(store, "demo")
    age_everything(30 * 24 * HOUR)
    with pytest.raises(CommandError) as refused:
        prune_cmd(*args)
    assert message in str(refused.value)
    assert refused.value.returncode == 2
    assert Task.objects.count() == 1


@pytest.mark.django_db
def test_the_retention_setting_is_the_default(store, settings) -> None:
    settings.RIVET = {**settings.RIVET, "RETENTION": "1d"}
    make_done(store, "demo")
    age_everything(2 * 24 * HOUR)
    assert "pruned 1 done task(s)" in prune_cmd()


@pytest.mark.django_db(transaction=True)
def test_a_bad_duration_exits_2_from_the_command_line() -> None:
    done = manage("rivet_prune", "--older-than", "3 weeks", env=child_environ(postgres_url()))
    assert done.returncode == 2
    assert "--older-than must be a duration such as 7d, 12h, 30m or 90s" in done.stderr
    assert "'3 weeks'" in done.stderr


@pytest.mark.django_db(transaction=True)
def test_a_worker_with_a_retention_prunes_while_it_runs(store) -> None:
    old = [make_done(store, "kept-running") for _ in range(7)]
    store.task_fence(Lease(task_id=old[0], epoch=0, owner="gone"), "fail")
    pending = store.task_enqueue(build_spec(queue="elsewhere", kind="noop")).task_id
    age_everything(2 * HOUR)
    pruner = Pruner(store=store, older_than=HOUR, every=0.2, batch_size=3, owner="w-prune")
    worker = Worker(WorkerConfig(queues=("idle",), poll_interval=0.1), store=store, pruner=pruner)
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + 60
        while Task.objects.filter(state="done").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        recent = make_done(store, "kept-running")
        time.sleep(0.5)  # a few more prune rounds: the recent task must survive them
    finally:
        worker.stop()
        runner.join(timeout=30)
    assert not runner.is_alive()
    assert set(Task.objects.values_list("id", flat=True)) == {pending, recent}
    assert FencedWrite.objects.count() == 0
