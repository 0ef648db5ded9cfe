"""One trace across real processes: an API request, two attempts (the first aborted), one write.

The request runs in this process (DRF's APIClient inside a span, as a host's Django
instrumentation would open one); the workers and the effect service are real child processes
whose tracer provider is the SDK with its in-memory exporter (tests/otel_child/sitecustomize.py),
writing each span to a file as it starts and ends. The first worker aborts between the effect
and the ack (the ``after_effect_before_ack`` failpoint: SIGABRT), so its attempt span never
ends; its effect request, answered by the service, still names it as the parent, and the
second attempt's span names it as lost (the event ``rivet.previous_attempt_lost``).
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from pathlib import Path

import pytest
from opentelemetry import trace
from rest_framework.test import APIClient

from rivet.stores import store_for_alias
from tests.effect_service import start_service, stop_service
from tests.factories import UserFactory

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

CHILD = Path(__file__).resolve().parents[1] / "otel_child"


def traced(folder: Path) -> dict[str, str]:
    """The variables that give a child the SDK and its span file (tests/otel_child)."""
    inherited = os.environ.get("PYTHONPATH")
    path = os.pathsep.join([str(CHILD), inherited]) if inherited else str(CHILD)
    return {"TEST_OTEL_SPANS": str(folder), "PYTHONPATH": path}


def read_spans(folder: Path) -> list[dict]:
    """Every span the children wrote: its end line if it ended, else its start line."""
    by_id: dict[str, dict] = {}
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            span = json.loads(line)
            if span["phase"] == "end" or span["span_id"] not in by_id:
                by_id[span["span_id"]] = span
    return list(by_id.values())


def test_one_trace_from_the_request_through_two_attempts_to_one_effect_write(
    workers, effect_database_url, effect_db, tmp_path, spans
):
    folder = tmp_path / "spans"
    folder.mkdir()
    child = traced(folder)
    service = start_service(effect_database_url, tmp_path / "service.log", threads=4, **child)
    try:
        queue, key = f"t-{uuid.uuid4().hex[:8]}", f"pay-{uuid.uuid4().hex}"
        api = APIClient()
        api.force_login(UserFactory(permissions=["rivet.add_task"]))
        body = {"kind": "effect", "payload": {"amount": 5}, "queue": queue, "idem_key": key}
        with trace.get_tracer("tests").start_as_current_span("POST /rivet/tasks/") as request:
            answer = api.post("/rivet/tasks/", body, format="json")
        assert answer.status_code == 201, answer.content
        task_id = answer.json()["id"]

        env = workers.env(EFFECT_SERVICE_URL=service.url, **child)
        aborted = workers.start(
            "--queue", queue, "--lease-ttl-secs", "1", "--once",
            env={**env, "RIVET_FAILPOINT": "after_effect_before_ack:1.0"},
        )  # fmt: skip
        assert aborted.wait() == -signal.SIGABRT, aborted.log
        store = store_for_alias("default")
        workers.wait_for(lambda: store.queue_stats(queue).ready == 1, "the lease to lapse")
        normal = workers.start("--queue", queue, "--lease-ttl-secs", "5", "--once", env=env)
        assert normal.wait() == 0, normal.log
    finally:
        stop_service(service)

    task = workers.task(task_id)
    assert (task.state, task.attempts, task.result["replay"]) == ("done", 2, True)
    assert effect_db.effects(key) == 1
    assert "traceparent" not in task.payload

    root = request.get_span_context()
    every = read_spans(folder)
    found = [span for span in every if span["trace_id"] == format(root.trace_id, "032x")]
    # Outside the trace: only the service's own readiness checks (GET /health).
    assert {span["name"] for span in every if span not in found} <= {"GET /health"}
    attempts = sorted(
        (s for s in found if s["name"] == "rivet.attempt effect"),
        key=lambda s: s["attributes"]["rivet.attempt"],
    )
    assert [(s["attributes"]["rivet.attempt"], s["phase"]) for s in attempts] == [
        (1, "start"),  # aborted: the span never ended
        (2, "end"),
    ]
    for span in attempts:
        assert span["parent_id"] == format(root.span_id, "016x")
        assert span["attributes"]["rivet.task.id"] == task_id
        assert span["attributes"]["rivet.task.queue"] == queue
        assert span["attributes"]["rivet.lease_epoch"] == span["attributes"]["rivet.attempt"]
    assert attempts[1]["attributes"]["rivet.ending"] == "acked"
    # The aborted attempt's span was never exported: the next one names it as lost.
    assert attempts[1]["event_attributes"]["rivet.previous_attempt_lost"] == {
        "rivet.lost.attempt": 1,
        "rivet.lost.lease_epoch": 1,
        "rivet.settled_epoch": -1,
    }

    posts = [s for s in found if s["name"] == "POST /effects"]
    by_parent = {s["parent_id"]: s for s in posts}
    assert set(by_parent) == {s["span_id"] for s in attempts}, "one request per attempt"
    first, second = (by_parent[s["span_id"]] for s in attempts)
    assert (first["attributes"]["effect.replay"], second["attributes"]["effect.replay"]) == (
        False,
        True,
    )
    (write,) = [s for s in found if s["name"] == "effect.write"]
    assert write["parent_id"] == first["span_id"]
    assert write["attributes"]["effect.key"] == key
