"""Retention without a database: the duration option, its checks, and the conformance checks
catching stores that prune the wrong rows."""

from __future__ import annotations

import pytest

from rivet.checks import check_rivet_settings
from rivet.conformance import CHECKS, Harness
from rivet.stores.memory import FakeClock, MemoryStore
from rivet.worker.options import DAY, Expected, OptionError, duration, resolve
from rivet.worker.prune import prune


@pytest.mark.parametrize(
    ("text", "secs"),
    [("90", 90.0), ("90s", 90.0), ("15m", 900.0), ("12h", 43200.0), ("7d", 7 * DAY)]
    + [(" 2w ", 14 * DAY), ("1.5h", 5400.0), (45, 45.0), (0.5, 0.5)],
)
def test_durations_name_seconds_with_a_unit(text, secs) -> None:
    assert duration(text) == secs


@pytest.mark.parametrize("text", ["", "soon", "7 days", "-1h", "0", "0d", "1y", True, "3651d"])
def test_bad_durations_are_refused_saying_what_is_expected(text) -> None:
    with pytest.raises(Expected, match="a duration such as 7d, 12h, 30m or 90s"):
        duration(text)


def test_the_worker_options_read_the_retention_from_each_source(settings) -> None:
    assert resolve({}, {})["retention"] is None, "no retention unless one is set"
    assert resolve({"retention": "7d"}, {})["retention"] == 7 * DAY
    assert resolve({}, {"RIVET_RETENTION": "12h"})["retention"] == 12 * 3600.0
    settings.RIVET = {**settings.RIVET, "RETENTION": "30d", "PRUNE_BATCH_SIZE": 50}
    values = resolve({}, {})
    assert (values["retention"], values["prune_batch_size"]) == (30 * DAY, 50)
    with pytest.raises(OptionError, match="RIVET_RETENTION must be a duration"):
        resolve({}, {"RIVET_RETENTION": "forever"})


def test_bad_retention_settings_fail_the_system_checks(settings) -> None:
    settings.RIVET = {
        **settings.RIVET,
        "RETENTION": "forever",
        "PRUNE_EVERY_SECS": 0,
        "PRUNE_BATCH_SIZE": 10**9,
    }
    messages = [error.msg for error in check_rivet_settings() if error.id == "rivet.E002"]
    assert any(m.startswith("RIVET['RETENTION'] must be a duration") for m in messages)
    assert any(m.startswith("RIVET['PRUNE_EVERY_SECS'] must be") for m in messages)
    assert any(m.startswith("RIVET['PRUNE_BATCH_SIZE'] must be an integer") for m in messages)


class PrunesDeadToo(MemoryStore):
    def _old_done(self, older_than_secs, queue):
        cutoff = self.clock().timestamp() - older_than_secs
        return [
            t.id
            for t in self._tasks.values()
            if t.state in ("done", "dead")
            and t.updated_at.timestamp() <= cutoff
            and queue in (None, t.queue)
        ]


class IgnoresTheLimit(MemoryStore):
    def task_prune(self, older_than_secs, limit, queue=None):
        return super().task_prune(older_than_secs, 10**6, queue)


class IgnoresTheAge(MemoryStore):
    def fenced_prune(self, older_than_secs, limit, queue=None):
        return super().fenced_prune(0, limit, queue)


@pytest.mark.parametrize(
    ("store_class", "check_name"),
    [
        (PrunesDeadToo, "prune_deletes_only_done_tasks_past_the_retention"),
        (IgnoresTheLimit, "prune_takes_at_most_limit_rows_per_call"),
        (IgnoresTheAge, "prune_deletes_old_fenced_records"),
    ],
)
def test_the_conformance_checks_catch_a_wrong_prune(store_class, check_name) -> None:
    clock = FakeClock()
    harness = Harness(store=store_class(clock=clock), advance=clock.advance)
    with pytest.raises(AssertionError):
        CHECKS[check_name](harness)
    right = FakeClock()
    CHECKS[check_name](Harness(store=MemoryStore(clock=right), advance=right.advance))


def test_prune_goes_batch_by_batch_until_one_comes_back_short() -> None:
    calls: list[tuple[str, int]] = []

    class Counting(MemoryStore):
        def task_prune(self, older_than_secs, limit, queue=None):
            calls.append(("task", limit))
            return [3, 3, 1][len([c for c in calls if c[0] == "task"]) - 1]

        def fenced_prune(self, older_than_secs, limit, queue=None):
            calls.append(("fenced", limit))
            return 0

    pruned = prune(Counting(), older_than=60, batch_size=3)
    assert (pruned.tasks, pruned.fenced) == (7, 0)
    assert calls == [("task", 3)] * 3 + [("fenced", 3)]
