"""The chaos run's timeline plot (chaos_project.chaos.timeline): its data on one clock, its PNG.

A real run writes it beside its JSON (tests/acceptance/test_chaos_run.py checks the file).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from chaos_project.chaos.fleet import EventLog
from chaos_project.chaos.timeline import (
    Timeline,
    per_second,
    read_timeline,
    timeline_path,
    write_timeline,
)
from rivet.models import FencedWrite
from tests.factories import task_in

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.mark.django_db
def test_events_fenced_writes_and_done_tasks_share_the_event_logs_clock(tmp_path) -> None:
    began = datetime.now(UTC)
    log = EventLog(tmp_path / "events.jsonl")
    log.add("start", owner="w0")
    log.add("kill", owner="w0")
    FencedWrite.objects.create(
        task_id=1, queue="tl", op="ack", epoch=1, created_at=began + timedelta(seconds=2)
    )
    task_in("default", queue="tl", done=True, updated_at=began + timedelta(seconds=5))
    task_in("default", queue="other", done=True, updated_at=began + timedelta(seconds=5))
    timeline = read_timeline(log, queue="tl", duration=10)
    assert [r["event"] for r in timeline.events] == ["start", "kill"]
    assert timeline.fenced == [pytest.approx(2.0, abs=0.5)]
    assert timeline.done == [pytest.approx(5.0, abs=0.5)]
    assert timeline.chaos == (timeline.events[0]["t"], timeline.events[0]["t"] + 10)


def test_lanes_name_what_happened_faults_included_bookkeeping_left_out() -> None:
    records = [
        {"t": 0.1, "event": "start"},
        {"t": 1.0, "event": "kill"},
        {"t": 1.0, "event": "signal"},
        {"t": 2.0, "event": "exit"},
        {"t": 3.0, "event": "db-restart"},
        {"t": 4.0, "event": "zombie_verdict"},
    ]
    lanes = Timeline(events=records).lanes()
    assert [(label, times) for label, _, _, times in lanes] == [
        ("worker started", [0.1]),
        ("SIGKILL", [1.0]),
        ("fault: db-restart", [3.0]),
    ]


def test_per_second_counts_fall_in_one_second_bins() -> None:
    assert per_second([0.2, 0.9, 1.5, 3.99], 4.2) == ([0.0, 1.0, 2.0, 3.0, 4.0], [2, 1, 0, 1, 0])


def test_the_plot_is_a_png_beside_the_json(tmp_path) -> None:
    path = timeline_path(tmp_path / "run.json")
    assert path == tmp_path / "run-timeline.png"
    timeline = Timeline(
        events=[{"t": 0.0, "event": "start"}, {"t": 1.2, "event": "failpoint"}],
        fenced=[1.5, 1.7],
        done=[0.5, 0.6, 2.5],
        chaos=(0.0, 2.0),
    )
    write_timeline(path, timeline, title="seed 1")
    assert path.read_bytes().startswith(PNG)
