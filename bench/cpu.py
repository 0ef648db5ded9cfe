"""Where the CPU of a drain goes: the whole machine, and the processes the bench started.

A snapshot reads the machine's busy time from ``/proc/stat`` (every state but idle and iowait)
and each named process's own user + system time from ``/proc/PID/stat``; two snapshots around a
drain divide into milliseconds of CPU per task. PostgreSQL is the processes named ``postgres``
(a backend that exits inside the window takes its time with it: the bench's connections live
through a drain); what the machine spent beyond the named processes is whatever else ran, small
on a quiet machine. The machine's cores over its CPU per task bound the rate: no configuration
of these processes on this machine goes faster, whatever the concurrency.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def machine_busy_secs(stat: Path = Path("/proc/stat")) -> float:
    """CPU seconds every core together has been busy since boot (all but idle and iowait)."""
    values = [int(x) for x in stat.read_text().splitlines()[0].split()[1:]]
    # user nice system idle iowait irq softirq steal (guest time is inside user already)
    busy = sum(values[:8]) - values[3] - values[4]
    return busy / TICKS


def process_secs(pid: int) -> float | None:
    """User + system CPU seconds of a live process; None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # the command name may hold spaces
    return (int(fields[11]) + int(fields[12])) / TICKS


def postgres_pids(proc: Path = Path("/proc")) -> list[int]:
    """Every process named ``postgres`` on this machine: the server and its backends."""
    pids = []
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == "postgres":
                    pids.append(int(entry.name))
            except OSError:
                continue  # gone meanwhile
    return pids


@dataclass(frozen=True)
class Snapshot:
    machine: float
    #: group name -> {pid: CPU seconds} of the group's processes alive then
    processes: Mapping[str, Mapping[int, float]] = field(default_factory=dict)


def snapshot(groups: Mapping[str, list[int]]) -> Snapshot:
    """The machine's busy seconds and each group's processes' seconds, now."""
    processes: dict[str, dict[int, float]] = {}
    for name, pids in groups.items():
        alive = {pid: process_secs(pid) for pid in pids}
        processes[name] = {pid: secs for pid, secs in alive.items() if secs is not None}
    return Snapshot(machine=machine_busy_secs(), processes=processes)


def per_task_ms(before: Snapshot, after: Snapshot, tasks: int) -> dict[str, float]:
    """Milliseconds of CPU per task: ``machine``, each group, ``rest`` (the machine less the
    groups), and ``bound``, the tasks per second the machine's cores allow at that cost.

    A group's time is its processes' time between the snapshots: a process that started in
    between counts from zero, one that ended in between is not counted (its last seconds are
    lost: the bench keeps its processes alive through a drain)."""
    if tasks <= 0:
        raise ValueError(f"tasks must be above 0, got {tasks}")
    machine = (after.machine - before.machine) * 1000 / tasks
    groups = {}
    for name, pids in after.processes.items():
        earlier = before.processes.get(name, {})
        spent = sum(secs - earlier.get(pid, 0.0) for pid, secs in pids.items())
        groups[name] = spent * 1000 / tasks
    result = {"machine": machine, **groups, "rest": max(0.0, machine - sum(groups.values()))}
    result["bound"] = (os.cpu_count() or 1) * 1000 / machine if machine > 0 else 0.0
    return result


class SteadyWindow:
    """CPU per task over the middle of a drain: from the first look at which a tenth of the
    tasks are done to the first at which nine tenths are. The start (connections opened, the
    first claims) and the tail (the last, half-empty flushes) stay out, so the figure is the
    steady cost a longer run would show. ``look`` is called with the tasks done so far."""

    def __init__(self, tasks: int, take: Callable[[], Snapshot]) -> None:
        self.low, self.high = max(1, tasks // 10), max(2, tasks * 9 // 10)
        self.take = take
        self.first: tuple[int, Snapshot] | None = None
        self.last: tuple[int, Snapshot] | None = None

    def look(self, done: int) -> None:
        if self.first is None and done >= self.low:
            self.first = (done, self.take())
        elif self.first is not None and self.last is None and done >= self.high:
            self.last = (done, self.take())

    def per_task_ms(self) -> dict[str, float] | None:
        """None when the drain went past both marks between two looks."""
        if self.first is None or self.last is None or self.last[0] <= self.first[0]:
            return None
        return per_task_ms(self.first[1], self.last[1], self.last[0] - self.first[0])
