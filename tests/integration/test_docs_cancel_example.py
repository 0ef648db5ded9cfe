"""docs/http-api.md's cancel-then-requeue transcript shows what the API really answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from tests.factories import UserFactory, task_in

pytestmark = pytest.mark.django_db

HTTP_API_MD = Path(__file__).resolve().parents[2] / "docs" / "http-api.md"
PERMS = ["rivet.view_task", "rivet.requeue_deadletter", "rivet.cancel_task"]
# Fields whose values belong to one run (ids, times, the worker's name).
RUN_FIELDS = {"id", "visible_at", "created_at", "updated_at", "lease_owner", "at"}


def documented_answer(request: str) -> dict:
    """The JSON body the transcript shows after the ``curl`` line that ends with ``request``."""
    lines = HTTP_API_MD.read_text().splitlines()
    for index, line in enumerate(lines):
        if line.startswith("$ curl") and f"{request} -w" in line:
            return json.loads(lines[index + 1])
    raise AssertionError(f"docs/http-api.md has no curl of {request}")


def comparable(value):
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items() if k not in RUN_FIELDS}
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return value


def test_the_documented_cancel_and_requeue_match_the_api() -> None:
    client = APIClient()
    client.force_login(UserFactory(permissions=PERMS))
    task = task_in("default", queue="idle", kind="noop", payload=None, idem_key="report-7")
    cancelled = client.post(f"/rivet/tasks/{task.id}/cancel/").json()
    requeued = client.post(f"/rivet/dead-letters/{task.id}/requeue/").json()
    assert comparable(documented_answer("$R/tasks/1/cancel/")) == comparable(cancelled)
    assert comparable(documented_answer("$R/dead-letters/1/requeue/")) == comparable(requeued)
    assert requeued["last_error"] == "" and requeued["state"] == "pending"
