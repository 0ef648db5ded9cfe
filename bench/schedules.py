"""The scheduler's part of the benchmark: N one-second schedules on W real workers.

What it measures, in one run on the workers the bench starts (``--queue bench``, which the
ticks never reach: they go to the queue ``TICK_QUEUE``, which no worker consumes, so what is
measured is the scheduler and nothing it enqueues):

1. the workers' CPU with no schedule at all, for ``secs`` seconds but at most ``IDLE_SECS``
   (the baseline: the worker's own loop, heartbeat-free since it holds nothing);
2. N schedules ``* * * * * *`` (policy ``all``) are made; once every one has fired (and two
   seconds more), the workers' CPU and every tick's lateness over ``secs`` seconds.

Lateness of a tick = when its task was first seen committed (a poller reads new task ids every
``POLL_SECS``, so the figure is rounded up to that) minus the tick's time. Every tick the
schedules owe (from each schedule's own history: ``since`` to ``last_tick_at``) is checked
against the tasks: ``enqueued_twice`` and ``missing`` must be 0. The scheduler's cost is the
CPU the workers spent beyond the baseline, per worker and per 1 000 ticks.

Only rows it made are touched: schedules named ``SCHEDULE_PREFIX...`` and tasks of
``TICK_QUEUE``, removed before and after.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from django.db import connections

from bench.target import Target

SCHEDULE_PREFIX = "bench-schedule-"
TICK_QUEUE = "bench-ticks"
IDLE_SECS = 10.0
POLL_SECS = 0.05
#: Seconds measured after every schedule has fired once (their first passes are not measured).
SETTLE_SECS = 2.0
#: The longest wait for every schedule's first tick (a worker with no schedule looks again
#: every second, and 1 000 schedules take a few passes).
FIRST_TICKS_TIMEOUT_SECS = 60.0


class Worker(Protocol):
    pid: int


def cpu_secs(pid: int) -> float:
    """User + system CPU seconds of a live process (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_per_sec(workers: Sequence[Worker], secs: float, during: Callable[[], None]) -> list[float]:
    """Each worker's CPU seconds per second while ``during`` runs (it should take ``secs``)."""
    before = [cpu_secs(w.pid) for w in workers]
    started = time.monotonic()
    during()
    took = max(time.monotonic() - started, secs)
    return [(cpu_secs(w.pid) - b) / took for w, b in zip(workers, before, strict=True)]


def make_schedules(count: int) -> None:
    from rivet.models import Schedule

    forget()
    Schedule.objects.bulk_create(
        Schedule(
            name=f"{SCHEDULE_PREFIX}{i:05d}",
            kind="noop",
            cron="* * * * * *",
            queue=TICK_QUEUE,
            missed="all",
            max_missed=1000,
            payload={"s": i},
        )
        for i in range(count)
    )


def forget() -> None:
    """Remove the schedules and tick tasks this module made."""
    from rivet.models import Schedule, Task

    Schedule.objects.filter(name__startswith=SCHEDULE_PREFIX).delete()
    Task.objects.filter(queue=TICK_QUEUE).delete()


def pause_schedules() -> None:
    """Disable them all: their history ends at each one's last tick."""
    from rivet.models import Schedule

    Schedule.objects.filter(name__startswith=SCHEDULE_PREFIX).update(enabled=False)


def wait_first_ticks(count: int, check: Callable[[], None]) -> None:
    """Until every schedule has fired at least once; ``check`` raises if a worker died."""
    from rivet.models import Task

    deadline = time.monotonic() + FIRST_TICKS_TIMEOUT_SECS
    while Task.objects.filter(queue=TICK_QUEUE).values("payload__s").distinct().count() < count:
        check()
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{count} schedules did not all fire within {FIRST_TICKS_TIMEOUT_SECS:g} s"
            )
        time.sleep(0.2)
    time.sleep(SETTLE_SECS)


class Poller:
    """Notes when each new task id is first seen committed, on a connection of its own."""

    def __init__(self) -> None:
        self.first_seen: dict[int, float] = {}
        self.started = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-tick-poller", daemon=True)

    def __enter__(self) -> Poller:
        self.started = time.time()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        top = 0
        try:
            with connections["default"].cursor() as cursor:
                while not self._stop.is_set():
                    # ids are handed out before commit: look back a little for late commits
                    cursor.execute(
                        "SELECT id FROM rivet_task WHERE queue = %s AND id > %s",
                        [TICK_QUEUE, top - 5000],
                    )
                    now = time.time()
                    for (task_id,) in cursor.fetchall():
                        self.first_seen.setdefault(task_id, now)
                        top = max(top, task_id)
                    time.sleep(POLL_SECS)
        finally:
            connections["default"].close()


def tick_figures(first_seen: dict[int, float], window_start: float) -> dict[str, Any]:
    """Ticks made, enqueued twice, missing (from the schedules' own history), and lateness."""
    from rivet.models import Schedule, Task
    from rivet.schedules.operate import owed_ticks

    by_schedule: dict[int, list[datetime]] = {}
    late: list[float] = []
    for task_id, payload in Task.objects.filter(queue=TICK_QUEUE).values_list("id", "payload"):
        tick = datetime.fromisoformat(payload["scheduled_at"])
        by_schedule.setdefault(payload["s"], []).append(tick)
        if tick.timestamp() >= window_start and task_id in first_seen:
            late.append(max(0.0, first_seen[task_id] - tick.timestamp()))
    twice = sum(len(ticks) - len(set(ticks)) for ticks in by_schedule.values())
    missing = 0
    for schedule in Schedule.objects.filter(name__startswith=SCHEDULE_PREFIX):
        owed = owed_ticks(schedule)
        missing += len(set(owed) - set(by_schedule.get(schedule.payload["s"], [])))
    late.sort()

    def q(p: float) -> float | None:
        return late[min(len(late) - 1, int(p * len(late)))] if late else None

    return {
        "ticks": sum(map(len, by_schedule.values())),
        "enqueued_twice": twice,
        "missing": missing,
        "measured_ticks": len(late),
        "lateness_p50_s": q(0.5),
        "lateness_p90_s": q(0.9),
        "lateness_p99_s": q(0.99),
        "lateness_max_s": late[-1] if late else None,
    }


def measure_scheduler(
    *, schedules: int, workers: Sequence[Worker], secs: float, check: Callable[[], None]
) -> dict[str, Any]:
    """The whole measurement on workers already started and ready; see the module docstring."""
    forget()
    # The workers' own start (the pool's connections, the scheduler's first look at the code's
    # schedules) ends after worker_started: let it pass, or the baseline holds it.
    time.sleep(SETTLE_SECS)
    idle_secs = min(IDLE_SECS, secs)
    idle = cpu_per_sec(workers, idle_secs, lambda: time.sleep(idle_secs))
    make_schedules(schedules)
    try:
        wait_first_ticks(schedules, check)
        with Poller() as poller:
            busy = cpu_per_sec(workers, secs, lambda: time.sleep(secs))
        pause_schedules()
        check()
        figures = tick_figures(poller.first_seen, poller.started)
    finally:
        forget()
    extra = [b - i for b, i in zip(busy, idle, strict=True)]
    ticks_per_sec = schedules  # every schedule ticks once a second
    return {
        "schedules": schedules,
        "workers": len(workers),
        "secs": secs,
        **figures,
        "cpu_idle_per_worker": idle,
        "cpu_busy_per_worker": busy,
        "cpu_scheduler_per_worker": extra,
        # CPU seconds the scheduler took (all workers together) per 1 000 ticks
        "cpu_secs_per_1000_ticks": sum(extra) / ticks_per_sec * 1000,
    }


# -- the report ----------------------------------------------------------------------------------

#: A tick's task is late by less than the schedules' one-second period at p99.
LATENESS_GOAL_SECS = 1.0


def scheduler_targets(result: dict[str, Any] | None) -> list[Target]:
    """The scheduler's two targets, measured or not."""
    if result is None:
        return [
            Target(name="scheduler: every tick once", goal="0 twice, 0 missing",
                   measured="not measured", met=None),
            Target(name="scheduler: tick lateness p99", goal=f"<= {LATENESS_GOAL_SECS:g} s",
                   measured="not measured", met=None),
        ]  # fmt: skip
    where = f"{result['schedules']} one-second schedules, {result['workers']} workers"
    twice, missing = result["enqueued_twice"], result["missing"]
    once = twice == 0 and missing == 0
    p99 = result["lateness_p99_s"]
    on_time = p99 is not None and p99 <= LATENESS_GOAL_SECS
    return [
        Target(
            name=f"scheduler: every tick once ({where})",
            goal="0 twice, 0 missing",
            measured=f"{twice} twice, {missing} missing of {result['ticks']:,}",
            met=once,
            bottleneck="" if once else "a defect, not a speed: see docs/schedules.md",
        ),
        Target(
            name=f"scheduler: tick lateness p99 ({where})",
            goal=f"<= {LATENESS_GOAL_SECS:g} s",
            measured="no tick measured" if p99 is None else f"{p99:.2f} s",
            met=on_time,
            bottleneck=""
            if on_time
            else "the passes' CPU (the Scheduler table), or a machine busier than its cores",
        ),
    ]


def scheduler_table(result: dict[str, Any]) -> list[str]:
    def secs(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f} s"

    def cpu(values: Sequence[float]) -> str:
        return " / ".join(f"{v:.3f}" for v in values)

    def cost(value: float) -> str:
        # Below the idle workers' own CPU it is noise, not a cost: say so, never a negative.
        return f"{value:.3f} CPU s" if value > 0 else "within the idle workers' noise"

    return [
        "## Scheduler",
        "",
        f"{result['schedules']:,} schedules `* * * * * *` (policy `all`) on {result['workers']} "
        f"idle workers, measured for {result['secs']:g} s after every schedule had fired once. "
        "Their ticks go to a queue no worker consumes: the figures are the scheduler's alone. "
        f"Lateness = a tick's task first seen committed (polled every {POLL_SECS * 1000:.0f} "
        "ms) minus the tick's time. Twice and missing are checked against every schedule's own "
        "history. CPU is per worker, in seconds per second: first with no schedule at all "
        f"({min(IDLE_SECS, result['secs']):g} s), then with the schedules; the difference is "
        "the scheduler's cost.",
        "",
        "| ticks | measured | twice | missing | lateness p50 | p90 | p99 | max "
        "| CPU per worker, no schedules | with schedules "
        "| scheduler, all workers, per 1 000 ticks |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
        f"| {result['ticks']:,} | {result['measured_ticks']:,} | {result['enqueued_twice']} "
        f"| {result['missing']} | {secs(result['lateness_p50_s'])} "
        f"| {secs(result['lateness_p90_s'])} | {secs(result['lateness_p99_s'])} "
        f"| {secs(result['lateness_max_s'])} | {cpu(result['cpu_idle_per_worker'])} "
        f"| {cpu(result['cpu_busy_per_worker'])} "
        f"| {cost(result['cpu_secs_per_1000_ticks'])} |",
    ]
