"""The ``effect`` kind against a real effect service: a 4xx is a permanent failure.

A key reused with another body gets 422 from the service on every attempt, so the handler
raises rivet.Permanent and the task is buried at once instead of using up its five attempts.
"""

from __future__ import annotations

import uuid

import pytest

import chaos_project.effect_kind  # noqa: F401 - registers the effect kind
from effect_project.client import post_effect
from rivet.failpoints import Failpoints
from rivet.producer import enqueue
from rivet.stores.memory import FakeClock, MemoryStore
from rivet.values import PERMANENT_SUFFIX
from rivet.worker import Worker, WorkerConfig

pytestmark = pytest.mark.acceptance


def run_once(store: MemoryStore) -> None:
    config = WorkerConfig(
        queues=("effects",), owner="effect-test", retry_backoff=0, retry_backoff_cap=0, once=True
    )
    Worker(config, store=store, failpoints=Failpoints()).run()


def test_a_key_reused_with_another_body_is_buried_at_once(effect_service, effect_db, settings):
    settings.EFFECT_SERVICE_URL = effect_service.url
    key = f"kind-{uuid.uuid4().hex}"
    post_effect(effect_service.url, key, {"amount": 1})
    store = MemoryStore(clock=FakeClock())
    task_id = enqueue("effect", {"amount": 2}, queue="effects", idem_key=key, using=store).task_id
    run_once(store)
    task = store.task_get(task_id)
    assert (task.state, task.attempts, task.max_attempts) == ("dead", 1, 5)
    assert "HTTP 422" in task.last_error
    assert task.last_error.startswith("Permanent: ")
    assert task.last_error.endswith(f"; {PERMANENT_SUFFIX}")
    assert effect_db.effects(key) == 1


def test_a_new_key_makes_its_effect_and_is_done(effect_service, effect_db, settings):
    settings.EFFECT_SERVICE_URL = effect_service.url
    key = f"kind-{uuid.uuid4().hex}"
    store = MemoryStore(clock=FakeClock())
    task_id = enqueue("effect", {"amount": 3}, queue="effects", idem_key=key, using=store).task_id
    run_once(store)
    task = store.task_get(task_id)
    assert (task.state, task.result["status"], task.result["replay"]) == ("done", 201, False)
    assert effect_db.effects(key) == 1
