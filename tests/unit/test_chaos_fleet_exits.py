"""An exit is counted by what ended the worker: a planned kill that meets a worker already
leaving on its own (stuck handlers, exit 3) is a kill *and* that worker's own exit."""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from pathlib import Path

from chaos_project.chaos.fleet import EventLog, Fleet, WorkerProcess


@dataclass
class FakeChild:
    log_path: Path
    returncode: int | None
    pid: int = 4242


def exited(tmp_path: Path, log_lines: list[dict], code: int, *, kill_sent: bool) -> EventLog:
    log_path = tmp_path / "chaos-w0-g1.log"
    log_path.write_text("".join(json.dumps(line) + "\n" for line in log_lines) + "plain text\n")
    events = EventLog(tmp_path / "events.jsonl")
    fleet = Fleet(size=1, worker_args=[], env={}, log_dir=tmp_path, log=events)
    child = FakeChild(log_path=log_path, returncode=code)
    proc = WorkerProcess(slot=0, owner="chaos-w0-g1", child=child, kill_sent=kill_sent)  # type: ignore[arg-type]
    fleet._exited(proc)
    return events


def test_a_kill_that_meets_a_worker_giving_up_reports_its_own_exit_too(tmp_path: Path) -> None:
    lines = [
        {"event": "worker_started", "owner": "chaos-w0-g1"},
        {"event": "too_many_abandoned", "owner": "chaos-w0-g1", "abandoned": 2},
    ]
    events = exited(tmp_path, lines, -signal.SIGKILL, kill_sent=True)
    assert events.chaos_counts()["kill"] == 1
    (own,) = events.unexpected_exits()
    assert own["status"] == "gave up: 2 handler(s) stuck, then SIGKILL by the harness"


def test_a_worker_stopping_with_exit_3_then_killed_is_reported(tmp_path: Path) -> None:
    lines = [{"event": "worker_stopped", "owner": "chaos-w0-g1", "exit_code": 3}]
    events = exited(tmp_path, lines, -signal.SIGKILL, kill_sent=True)
    assert events.unexpected_exits()[0]["status"].startswith("stopping with exit 3, then ")


def test_a_plain_kill_is_only_a_kill(tmp_path: Path) -> None:
    lines = [{"event": "worker_started"}, {"event": "worker_stopped", "exit_code": 0}]
    events = exited(tmp_path, lines, -signal.SIGKILL, kill_sent=True)
    assert events.chaos_counts()["kill"] == 1
    assert events.unexpected_exits() == []


def test_an_exit_3_the_kill_did_not_reach_is_its_own_exit(tmp_path: Path) -> None:
    events = exited(tmp_path, [{"event": "too_many_abandoned"}], 3, kill_sent=True)
    assert events.chaos_counts()["kill"] == 0
    assert [r["status"] for r in events.unexpected_exits()] == ["exit 3"]
