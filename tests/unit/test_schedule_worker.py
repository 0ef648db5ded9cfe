"""The scheduler in a worker: started and closed with it, off by a setting or with --once."""

from __future__ import annotations

import pytest

from rivet.checks import check_rivet_settings
from rivet.jobs import JobRegistry
from rivet.management.commands.rivet_worker import build_scheduler
from rivet.schedules.scheduler import Scheduler
from rivet.stores.memory import MemoryStore
from rivet.worker import WorkerConfig
from tests.unit.worker_kit import make_worker


class RecordingScheduler:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def start(self) -> None:
        self.calls.append("start")

    def close(self) -> None:
        self.calls.append("close")


def test_a_worker_starts_its_scheduler_and_closes_it_when_it_stops():
    scheduler = RecordingScheduler()
    worker = make_worker(MemoryStore(), JobRegistry(), once=True, scheduler=scheduler)
    assert worker.run().exit_code == 0
    assert scheduler.calls == ["start", "close"]


@pytest.mark.parametrize(
    ("setting", "once", "runs"), [(True, False, True), (False, False, False), (True, True, False)]
)
def test_the_scheduler_runs_unless_turned_off_or_once(settings, setting, once, runs):
    settings.RIVET = {**settings.RIVET, "SCHEDULER": setting}
    config = WorkerConfig(queues=("q",), once=once, poll_interval=0.5)
    scheduler = build_scheduler(MemoryStore(), config)
    assert isinstance(scheduler, Scheduler) is runs
    if runs:
        assert (scheduler.alias, scheduler.every) == ("default", 0.5)


def test_the_setting_must_be_true_or_false(settings):
    settings.RIVET = {**settings.RIVET, "SCHEDULER": "yes"}
    found = [(error.id, error.msg) for error in check_rivet_settings()]
    assert ("rivet.E002", "RIVET['SCHEDULER'] must be True or False, got 'yes'") in found
