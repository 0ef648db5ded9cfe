"""What a worker tells the host: Django signals per attempt and JSON log lines with the task.

In-process against a MemoryStore (helpers in worker_kit.py).
"""

from __future__ import annotations

import io
import json
import logging

from rivet import signals
from rivet.jobs import job
from rivet.logs import configure
from tests.unit.worker_kit import (
    enqueue,
    make_worker,
)


def test_signals_fire_for_each_attempt(store, jobs):
    events: list[tuple[str, int]] = []
    receivers = {
        "processing": signals.task_processing,
        "processed": signals.task_processed,
        "released": signals.task_released,
        "failed": signals.task_failed,
    }
    handlers = {}
    for name, sig in receivers.items():
        handlers[name] = lambda sender, context, name=name, **kw: events.append(
            (name, context.attempt)
        )
        sig.connect(handlers[name])
    try:
        job("ok", registry=jobs)(lambda ctx: None)
        job("bad", registry=jobs)(lambda ctx: 1 / 0)
        enqueue(store, "ok")
        enqueue(store, "bad", max_attempts=2)
        make_worker(store, jobs, once=True, concurrency=1).run()
    finally:
        for name, sig in receivers.items():
            sig.disconnect(handlers[name])
    assert events == [
        ("processing", 1),
        ("processed", 1),
        ("processing", 1),
        ("released", 1),
        ("processing", 2),
        ("failed", 2),
    ]


def test_json_logs_carry_the_task_identity(store, jobs):
    job("noop", registry=jobs)(lambda ctx: None)
    task_id = enqueue(store, "noop")
    lines = run_logged(store, jobs)
    acked = next(line for line in lines if line["event"] == "acked")
    assert {k: acked[k] for k in ("task", "kind", "attempt", "epoch", "owner")} == {
        "task": task_id,
        "kind": "noop",
        "attempt": 1,
        "epoch": 1,
        "owner": "unit:1",
    }
    assert [line["event"] for line in lines if "task" in line] == ["claimed", "acked"]


def run_logged(store, jobs) -> list[dict]:
    """The JSON lines of one ``--once`` worker run over ``store``."""
    stream = io.StringIO()
    saved = logging.getLogger("rivet").handlers[:], logging.getLogger("rivet").propagate
    configure("json", stream=stream)
    try:
        make_worker(store, jobs, once=True).run()
    finally:
        logging.getLogger("rivet").handlers, logging.getLogger("rivet").propagate = saved
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_server_warning_is_logged_at_start_and_the_worker_runs(store, jobs, monkeypatch):
    job("noop", registry=jobs)(lambda ctx: None)
    enqueue(store, "noop")
    monkeypatch.setattr(store, "server_warnings", lambda: [("autovacuum_off", "turn it on")])
    lines = run_logged(store, jobs)
    (warning,) = [line for line in lines if line["event"] == "autovacuum_off"]
    assert (warning["level"], warning["note"]) == ("warning", "turn it on")
    assert [line["event"] for line in lines if "task" in line] == ["claimed", "acked"]


def test_a_server_check_that_fails_is_logged_and_the_worker_runs(store, jobs, monkeypatch):
    job("noop", registry=jobs)(lambda ctx: None)
    enqueue(store, "noop")

    def broken() -> list:
        raise RuntimeError("permission denied for SHOW")

    monkeypatch.setattr(store, "server_warnings", broken)
    lines = run_logged(store, jobs)
    (failed,) = [line for line in lines if line["event"] == "server_check_failed"]
    assert "permission denied for SHOW" in failed["error"]
    assert [line["event"] for line in lines if "task" in line] == ["claimed", "acked"]
