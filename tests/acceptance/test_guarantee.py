"""The guarantee end to end: real workers, a real effect service, the crash window hit on purpose.

Two deliveries of one task must give one effect, whether the second delivery comes from a lease
that lapsed after an abort or from an operator's requeue of a dead task.
"""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

import pytest

from rivet.stores import store_for_alias

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[2]
ABORT_AFTER_EFFECT = "after_effect_before_ack:1.0"


def abort_between_effect_and_ack(workers, service, queue: str) -> None:
    env = workers.env(EFFECT_SERVICE_URL=service.url, RIVET_FAILPOINT=ABORT_AFTER_EFFECT)
    crashed = workers.start("--queue", queue, "--lease-ttl-secs", "1", "--once", env=env)
    assert crashed.wait() == -signal.SIGABRT, crashed.log


def wait_until_ready(workers, queue: str) -> None:
    store = store_for_alias("default")
    workers.wait_for(lambda: store.queue_stats(queue).ready == 1, "the lease to lapse")


def drain(workers, service, queue: str) -> None:
    env = workers.env(EFFECT_SERVICE_URL=service.url)
    normal = workers.start("--queue", queue, "--lease-ttl-secs", "5", "--once", env=env)
    assert normal.wait() == 0, normal.log


def test_abort_after_effect_then_redelivery_gives_one_effect(
    workers,
    effect_service,
    effect_db,
):
    queue, key = f"g-{uuid.uuid4().hex[:8]}", f"pay-{uuid.uuid4().hex}"
    task_id = workers.enqueue("effect", {"amount": 100}, queue=queue, idem_key=key)

    abort_between_effect_and_ack(workers, effect_service, queue)
    task = workers.task(task_id)
    assert (task.state, task.attempts) == ("pending", 1)
    assert effect_db.effects(key) == 1

    wait_until_ready(workers, queue)
    drain(workers, effect_service, queue)

    task = workers.task(task_id)
    assert (task.state, task.attempts) == ("done", 2)
    assert task.result["replay"] is True
    assert task.result["status"] == 200
    assert effect_db.effects(key) == 1
    assert effect_db.dedups(key) == 1
    report = effect_service.get("/verify").json
    assert report["duplicate_effects"] == 0 and report["ok"] is True


def test_requeue_of_dead_task_whose_effect_happened_replays(
    workers,
    effect_service,
    effect_db,
    run_manage,
):
    queue, key = f"g-{uuid.uuid4().hex[:8]}", f"pay-{uuid.uuid4().hex}"
    task_id = workers.enqueue("effect", {"amount": 7}, queue=queue, idem_key=key, max_attempts=1)
    abort_between_effect_and_ack(workers, effect_service, queue)
    wait_until_ready(workers, queue)

    env = workers.env()
    swept = run_manage("rivet_dlq", "--queue", queue, "sweep", env=env)
    assert swept.returncode == 0, swept.stderr
    task = workers.task(task_id)
    assert task.state == "dead"
    assert task.last_error.endswith("max attempts exceeded (no ack, worker lost)")

    requeued = run_manage("rivet_dlq", "--queue", queue, "requeue", str(task_id), env=env)
    assert requeued.returncode == 0, requeued.stderr
    drain(workers, effect_service, queue)

    task = workers.task(task_id)
    assert task.state == "done" and task.idem_key == key
    assert task.result["replay"] is True
    assert effect_db.effects(key) == 1


def test_demo_command_shows_the_guarantee_on_sqlite(tmp_path, run_manage):
    env = {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'rivet.sqlite3'}",
        "EFFECT_DATABASE_URL": f"sqlite:///{tmp_path / 'effect.sqlite3'}",
        "RIVET_READ_DOTENV": "0",
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
    }
    shown = run_manage("rivet_demo", "--port", "0", env=env)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    evidence = evidence_lines(shown.stdout)
    assert evidence["deliveries (attempts)"] == "2"
    assert evidence["effects written"] == "1"
    assert evidence["duplicate effects"] == "0"
    assert evidence["task state"] == "done"
    assert "Two deliveries. One effect. The task reads done." in shown.stdout


def evidence_lines(output: str) -> dict[str, str]:
    """The demo's "5. evidence" block as {label: value}."""
    block = output.split("5. evidence", 1)[1].split("\n\n", 1)[0]
    rows = (line.strip().rsplit(None, 1) for line in block.splitlines() if line.strip())
    return {label.strip(): value for label, value in rows}
