"""``--faults scheduler-stall``: a worker stopped inside its scheduler pass, with its schedules'
rows locked, and the proof that it cannot stop them for longer than the idle bound.

At seeded times one worker is replaced by one armed to stop itself (SIGSTOP) at the
``scheduler_pass_locked`` failpoint: its pass holds the rows of the schedules it found due and has
enqueued none of their ticks. Other workers skip locked rows (``FOR UPDATE SKIP LOCKED``), so
without a bound those schedules would not fire until the stopped worker's connection died. The
run's workers get ``--idle-in-transaction-timeout-secs STALL_BOUND_SECS``: the server ends the
stopped session after that long idle in its transaction, the locks go with it, and another
worker's pass fires the schedules again while the stalled worker is still stopped. It is
continued after ``HOLD_SECS``, long after the bound, so that a schedule that fired again was not
fired by the stalled worker itself.

The verdict (``judge``), from the queue database: for each stalled schedule, the first tick task
created after the stall began must come within ``STALL_BOUND_SECS + REFIRE_SLACK_SECS``
(a second for the next pass, and 2 s for a busy machine) and before the stalled worker was
continued. T2 (no due tick missing) is judged by the verifier as in every run with schedules.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connections

from chaos_project.chaos.fleet import EventLog, Fleet, WorkerProcess
from chaos_project.chaos.verifier import Violation

SCHEDULER_STALL = "scheduler-stall"
STALL_POINT = "scheduler_pass_locked"
#: The idle bound the run's workers get: short, so that a run shows a stall end.
STALL_BOUND_SECS = 2.0
#: Beyond the bound: the next pass of another worker (it looks again at held schedules every
#: quarter of a second, and a one-second tick may fall due meanwhile), plus 2 s for a busy
#: machine.
REFIRE_SLACK_SECS = 3.0
#: How long a stalled worker is kept stopped: well past bound + slack, so a schedule that fires
#: again before it is continued was fired by someone else.
HOLD_SECS = STALL_BOUND_SECS + REFIRE_SLACK_SECS + 3.0
#: Stalls fall in this share of the chaos, early enough for the hold to end within it.
WINDOW = (0.05, 0.3)
#: One stall for each this many seconds of chaos, at least one.
SECS_PER_STALL = 20.0
#: An armed worker that has not stalled after this long is replaced by a clean one.
ARM_GIVE_UP_SECS = 10.0
#: Tries of one planned stall (an armed worker killed, or whose passes lost every race).
TRIES = 3

FIRST_TICK_AFTER = """
SELECT payload ->> 'chaos_schedule' AS schedule, min(created_at)
FROM rivet_task
WHERE queue = %(queue)s AND kind = 'chaos.tick' AND created_at > %(since)s
  AND payload ->> 'chaos_schedule' = ANY(%(schedules)s)
GROUP BY 1
"""


def stall_times(rng: random.Random, duration: float) -> list[float]:
    """Seconds into the chaos, one in each equal slice of the window."""
    start, end = (duration * share for share in WINDOW)
    count = max(1, int(duration // SECS_PER_STALL))
    width = (end - start) / count
    return [round(start + width * (i + rng.random()), 3) for i in range(count)]


@dataclass
class Stall:
    owner: str
    schedules: list[str]
    stopped_at: float  # the harness's clock
    began: datetime  # the database's clock, when the harness saw it stopped
    proc: WorkerProcess
    continued: datetime | None = None
    held_secs: float = 0.0
    refired: dict[str, float] = field(default_factory=dict)
    """Seconds from ``began`` to each schedule's next tick task (none: it did not fire)."""


class SchedulerStall:
    """The fault; the chaos loop drives it (``Fault`` in chaos_project.chaos.faults)."""

    name = SCHEDULER_STALL

    def __init__(self, times: list[float], queue: str) -> None:
        self.times = list(times)
        self.queue = queue
        self.fleet: Fleet | None = None
        self.log: EventLog | None = None
        self.armed: WorkerProcess | None = None
        self.armed_at = 0.0
        self.active: list[Stall] = []
        self.stalls: list[Stall] = []
        self.tries = 0

    @staticmethod
    def worker_args() -> list[str]:
        return ["--idle-in-transaction-timeout-secs", f"{STALL_BOUND_SECS:g}"]

    def start(self, log: EventLog) -> None:
        self.log = log

    def tick(self, now: float) -> None:
        self._follow_armed(now)
        for stall in list(self.active):
            if now - stall.stopped_at >= HOLD_SECS:
                self._continue(stall, now)
        if self.times and self.times[0] <= now and self.armed is None and not self.active:
            self.times.pop(0)
            if not self._arm(now):
                self._try_again(now, "no free worker")

    def _try_again(self, now: float, reason: str) -> None:
        """A stall that did not happen is tried again a second later, up to TRIES times."""
        self.tries += 1
        again = self.tries < TRIES
        self.log.add("skipped", kind=self.name, reason=reason, tried_again=again)
        if again:
            self.times.insert(0, now + 1.0)
        else:
            self.tries = 0

    def stop(self) -> None:
        self.times.clear()
        for stall in list(self.active):
            self._continue(stall, time.monotonic())
        if self.armed is not None:
            self.fleet.disarm()
            self.armed = None

    def count(self) -> int:
        return len(self.stalls)

    def detail(self) -> str:
        return f"bound {STALL_BOUND_SECS:g} s, each held {HOLD_SECS:g} s"

    # -- carrying it out ---------------------------------------------------------------------

    def _arm(self, now: float) -> bool:
        for proc in self.fleet.slots:
            if proc is not None and self.fleet.is_free(proc) and proc.working():
                self.armed = self.fleet.arm_stall(proc.slot, STALL_POINT)
                self.armed_at = now
                return self.armed is not None
        return False

    def _follow_armed(self, now: float) -> None:
        proc = self.armed
        if proc is None:
            return
        if proc.child.poll() is not None:
            self.armed = None
            self._try_again(now, "the armed worker exited")
            return
        schedules = _locked_schedules(proc) if proc.child.stopped() else None
        if not schedules:  # not stopped yet, or stopped but not at its point (not ours)
            if now - self.armed_at >= ARM_GIVE_UP_SECS:
                self.fleet.disarm()
                self.armed = None
                self._try_again(now, "no pass of the armed worker reached the point")
            return
        self.armed = None
        proc.stalling, proc.frozen = False, True  # thaw_all continues it if the run ends
        stall = Stall(
            owner=proc.owner,
            schedules=schedules,
            stopped_at=now,
            began=_db_now(),
            proc=proc,
        )
        self.active.append(stall)
        self.stalls.append(stall)
        self.tries = 0
        self.log.add(self.name, owner=proc.owner, schedules=stall.schedules)

    def _continue(self, stall: Stall, now: float) -> None:
        self.active.remove(stall)
        stall.continued = _db_now()
        stall.held_secs = round(now - stall.stopped_at, 3)
        self.fleet.thaw(stall.proc)
        self.log.add("stall_continued", owner=stall.owner, held_secs=stall.held_secs)

    # -- the verdict -------------------------------------------------------------------------

    def judge(self) -> list[Violation]:
        """Each stalled schedule fired again within the bound, while its staller was stopped."""
        allowed = STALL_BOUND_SECS + REFIRE_SLACK_SECS
        found = []
        for stall in self.stalls:
            stall.refired = self._refired(stall)
            late = self._late(stall, allowed)
            if late:
                found.append(
                    Violation(
                        "T2",
                        f"worker {stall.owner} stalled in its scheduler pass holding "
                        f"{len(stall.schedules)} schedule(s); with an idle bound of "
                        f"{STALL_BOUND_SECS:g} s each must fire again within {allowed:g} s, "
                        f"while it is still stopped ({stall.held_secs:g} s): "
                        + "; ".join(late[:5]),
                    )
                )
        return found

    @staticmethod
    def _late(stall: Stall, allowed: float) -> list[str]:
        if not stall.schedules:
            return ["its log does not name the schedules its pass held"]
        held = None if stall.continued is None else (stall.continued - stall.began).total_seconds()
        notes = []
        for name in stall.schedules:
            delay = stall.refired.get(name)
            if delay is None:
                notes.append(f"{name} did not fire again")
            elif delay > allowed:
                notes.append(f"{name} fired again after {delay:.1f} s")
            elif held is not None and delay >= held:
                notes.append(f"{name} fired again only once its staller was continued")
        return notes

    def _refired(self, stall: Stall) -> dict[str, float]:
        with connections["default"].cursor() as cursor:
            cursor.execute(
                FIRST_TICK_AFTER,
                {"queue": self.queue, "since": stall.began, "schedules": stall.schedules},
            )
            rows = cursor.fetchall()
        return {name: (first - stall.began).total_seconds() for name, first in rows}

    def longest_refire(self) -> float | None:
        delays = [delay for stall in self.stalls for delay in stall.refired.values()]
        return max(delays) if delays else None

    def summary(self) -> dict[str, Any]:
        return {
            "stalls": len(self.stalls),
            "bound_secs": STALL_BOUND_SECS,
            "allowed_secs": STALL_BOUND_SECS + REFIRE_SLACK_SECS,
            "longest_refire_secs": self.longest_refire(),
            "schedules_stalled": sum(len(stall.schedules) for stall in self.stalls),
        }


def _db_now() -> datetime:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


def _locked_schedules(proc: WorkerProcess) -> list[str]:
    """The schedules the stalled pass holds, from its ``failpoint_fired`` log line."""
    try:
        lines = proc.child.log_path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    for raw in reversed(lines):
        if '"failpoint_fired"' in raw and STALL_POINT in raw:
            try:
                return list(json.loads(raw[raw.index("{") :]).get("schedules", []))
            except ValueError:
                return []
    return []
