"""The chaos loop: every tick it reaps workers, releases tasks, follows zombies, applies due
events and ticks any other event source (the opt-in faults), until the chaos is over; then it
drains with the same tick minus the planned events.

Planned events wait for a worker they can really break instead of being skipped: a kill, a
failpoint or a zombie needs a started worker that holds leases (only a lease in flight tests
anything). An event also waits while breaking one more worker would leave fewer than half the
fleet working: the others must take the broken workers' tasks, or lapsed leases wait, the
backlog grows and zombies wake before anyone claimed their tasks. A failpoint waiting when a
slot restarts arms the new worker at once. Events still waiting when the chaos ends are
reported as not carried out.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from django.db import connections

from chaos_project.chaos import history as run_history
from chaos_project.chaos.fleet import Fleet, WorkerProcess
from chaos_project.chaos.history import CANCEL as CANCEL_ACTOR
from chaos_project.chaos.history import REQUEUE as REQUEUE_ACTOR
from chaos_project.chaos.history import SWEEP as SWEEP_ACTOR
from chaos_project.chaos.pacing import Pacer
from chaos_project.chaos.plan import (
    FAILPOINT,
    KILL,
    KINDS,
    PAUSE_POINT,
    PAUSE_POINT_BURY,
    PAUSE_POINT_RETRY,
    ZOMBIE,
    ChaosPlan,
    Planned,
)
from chaos_project.chaos.zombies import HEARTBEAT_POINT, Phase, Zombie
from chaos_project.kit import queries
from rivet.producer import cancel, resolve_store
from rivet.values import CancelOutcome

TICK_SECS = 0.05
#: A failpoint that no restart took within this long retires a running worker for an armed one.
ARM_ON_RESTART_SECS = 1.0
#: Armed workers at once (each one reaches its failpoint before another is armed): two, so the
#: default run's 60 s carry out its failpoints while zombies are stopped.
MAX_ARMED = 2
#: After SIGSTOP, what a zombie holds is read this much later: a write it sent just before it
#: stopped (a fail that releases a task) still commits on the server, and such a task is not
#: held; counting it would mistake the next claim of it for a bite.
SETTLE_SECS = 0.3
#: How the drain measures progress, and how often.
PROGRESS_EVERY_SECS = 1.0
#: A zombie paused here has its decided write's task cancelled while it sleeps (see cancel_one).
STATE_GUARD_POINT = "after_error_before_fail"
#: The points whose paused write is there to meet its task under another worker's lease (the
#: epoch guard of an ack, a retry, a burial). The task can be finished instead when the zombie
#: wakes (a one-shot task buried by the next claim at the zombie's own epoch, a cancel): the
#: write then meets the state guard only, and a store without that epoch guard would pass. A
#: zombie pauses at the same point again then, at most EPOCH_GUARD_RETRIES times a run.
EPOCH_GUARD_POINTS = (PAUSE_POINT, PAUSE_POINT_RETRY, PAUSE_POINT_BURY)
EPOCH_GUARD_RETRIES = 3
#: An operator's cancel every this many seconds of the chaos, through ``rivet.cancel`` (the path
#: the admin, the API and ``rivet_dlq cancel`` take): in turn a task a working worker holds (its
#: handler may finish before its heartbeat sees the mark: the store must bury it anyway, never
#: ack it) and a task a stopped zombie holds (buried at the zombie's epoch, now or at the next
#: claim: the zombie's late write must meet a finished task and be refused).
CANCEL_EVERY_SECS = 0.5
#: An operator's requeue of a dead chaos task every this many seconds of the chaos (through the
#: store's dead_requeue, the path the admin, the API and ``rivet_dlq requeue`` take): a new life
#: with fresh attempts, whose epochs must still grow (H4) and whose claims count afresh (H3).
#: A task is requeued at most REQUEUE_LIMIT times. Besides, a stopped zombie's task that dies
#: while it sleeps (a cancel, a one-shot task's burial) is requeued at once, before the zombie
#: is continued: its late write must meet a task in a new life under a newer epoch.
REQUEUE_EVERY_SECS = 1.0
REQUEUE_LIMIT = 2
#: An operator's requeue of a task that is not dead, every this many seconds of the chaos,
#: through the same ``dead_requeue``: in turn one leased (its worker at work), one pending and
#: not leased (ready, delayed or waiting for its retry), one cancel-marked (leased, its burial
#: to come at its worker's heartbeat) and one done. The store must refuse each (only a dead task
#: is revived); the history names the requeue's changes, and H3 fails any made to a task that
#: was not dead before it (one that died between the pick and the requeue is revived, rightly).
LIVE_REQUEUE_EVERY_SECS = 0.25
LIVE_REQUEUE_TARGETS = ("leased", "waiting", "cancel-marked", "done")
#: An operator's sweep (``dead_sweep``, the path of ``rivet_dlq sweep``, the admin and the API)
#: every this many seconds of the chaos, and at once after every cancel that marked a leased
#: task: it buries the pending tasks no claim may run (attempts used up, or cancelled) whose
#: lease lapsed, and must leave every live lease alone. Live leases it meets are there all the
#: time: a one-shot task's (max_attempts 1) and every task's last attempt, and a cancel-marked
#: task's until its worker's heartbeat buries it. H1 fails a burial that named no worker and
#: ended a lease still live by its own transaction's clock.
SWEEP_EVERY_SECS = 0.5


#: A woken zombie's new holders are stopped (pinned) until its late write landed, or this many
#: lease lengths: under one, so a pinned holder keeps its lease (it last heartbeated at most a
#: third of a lease before); a longer wait would only make it a zombie too, which is harmless.
PIN_LIMIT_LEASES = 0.5
#: After pinning, the rows are read this much later: a write a holder sent just before it was
#: stopped still commits on the server.
PIN_SETTLE_SECS = 0.1


def log_events(log_path: Path, event: str) -> Iterator[dict[str, Any]]:
    """The JSON records of one ``event`` in a worker's log, in order (none if it cannot be read;
    a line that is not JSON is skipped)."""
    marker = f'"{event}"'.encode()
    try:
        with log_path.open("rb") as log:
            lines = [raw for raw in log if marker in raw]
    except OSError:
        return
    for raw in lines:
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("event") == event:
            yield record


def paused_tasks(log_path: Path) -> tuple[int, ...]:
    """The tasks a worker's last ``failpoint_fired`` line names (its paused write's tasks: a
    ``task``, or the ``tasks`` of a flush or a heartbeat)."""
    tasks: tuple[int, ...] = ()
    for record in log_events(log_path, "failpoint_fired"):
        named = record.get("tasks", [record.get("task")])
        tasks = tuple(t for t in named if isinstance(t, int))
    return tasks


def write_meets_no_lease(zombie: Zombie, epochs: dict[int, tuple]) -> list[int]:
    """The tasks of a zombie's paused write, when it paused at an epoch guard's point and every
    one of them is finished now (``epochs``: task -> (lease_epoch, attempts, state, ...)): its
    write will meet the state guard, not the epoch guard it paused for. Otherwise []."""
    if not zombie.paused or zombie.pause_point not in EPOCH_GUARD_POINTS:
        return []
    tasks = [task for task in zombie.paused_tasks if task in epochs]
    if any(epochs[task][2] == "pending" for task in tasks):
        return []
    return tasks


def claimed_leases(log_path: Path) -> set[tuple[int, int]]:
    """The (task, epoch) of every ``claimed`` line in a worker's log: the leases it learned it
    holds. A claim whose commit reached the server but whose answer never reached the worker (the
    connection died with the primary in a failover: ``claim_failed``) leaves a lease in the
    database that the worker does not know, so it can write nothing for that task."""
    return {
        (record["task"], record["epoch"])
        for record in log_events(log_path, "claimed")
        if isinstance(record.get("task"), int) and isinstance(record.get("epoch"), int)
    }


def failed_writes(log_path: Path) -> set[int]:
    """The tasks a worker's log names in ``write_failed`` lines: writes it gave up because the
    database did not answer."""
    return {
        record["task"]
        for record in log_events(log_path, "write_failed")
        if isinstance(record.get("task"), int)
    }


def heartbeat_failed_after_pause(log_path: Path) -> bool:
    """Whether a worker's log has a ``heartbeat_failed`` line after its ``failpoint_fired``
    line: the heartbeat it paused before could not reach the database."""
    paused = False
    try:
        with log_path.open("rb") as log:
            for raw in log:
                if b'"failpoint_fired"' in raw:
                    paused = True
                elif paused and b'"heartbeat_failed"' in raw:
                    return True
    except OSError:
        return False
    return False


class Source(Protocol):
    """Anything that acts on the run at each tick (a fault: restart a server, cut the network)."""

    def tick(self, now: float) -> None: ...

    def close(self) -> None: ...


@dataclass
class LoopOutcome:
    zombies: list[Zombie] = field(default_factory=list)
    not_carried_out: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    drain_note: str = ""
    cancels: dict[str, int] = field(
        default_factory=lambda: {outcome.value: 0 for outcome in CancelOutcome}
    )
    """The operator cancels the harness issued, by what ``rivet.cancel`` answered."""
    requeues: dict[str, int] = field(default_factory=lambda: {"dead": 0, "asleep zombie's": 0})
    """The operator requeues the harness made: of a dead task, of a sleeping zombie's task."""
    requeue_asks: dict[str, int] = field(
        default_factory=lambda: {**dict.fromkeys(LIVE_REQUEUE_TARGETS, 0), "accepted": 0}
    )
    """The operator requeues the harness asked of tasks it saw not dead, by what it saw, and
    how many of them the store accepted (a task that died meanwhile is revived rightly)."""
    sweeps: dict[str, int] = field(
        default_factory=lambda: {"sweeps": 0, "after a cancel mark": 0, "buried": 0}
    )
    """The operator sweeps the harness made (of them right after a cancel mark) and the tasks
    they buried."""
    effect_faults: dict[str, int] = field(default_factory=dict)
    """The recording proxy's effect faults carried out (drop, reset, dup)."""

    def zombie_counts(self) -> dict[str, int]:
        return {phase.value: sum(1 for z in self.zombies if z.phase is phase) for phase in Phase}


class ChaosLoop:
    def __init__(
        self,
        *,
        fleet: Fleet,
        plan: ChaosPlan,
        pacer: Pacer,
        release: Callable[[range], None],
        queue: str,
        lease_ttl: float,
        say: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fleet = fleet
        self.plan = plan
        self.pacer = pacer
        self.release = release
        self.queue = queue
        self.lease_ttl = lease_ttl
        self.say = say
        self.clock = clock
        self.started = clock()
        self.sources: list[Source] = []
        self.outcome = LoopOutcome()
        self.due = list(plan.events)
        self.waiting: list[Planned] = []
        self.epoch_guard_retries = 0
        self.open: list[Zombie] = []
        self.settling: list[tuple[WorkerProcess, float]] = []  # stopped, not yet read
        self.chaos_on = True
        self.next_cancel = CANCEL_EVERY_SECS
        self.cancels_sent = 0
        self.marked: set[int] = set()
        """Tasks a cancel marked: never cancelled again (a second mark writes the row without
        changing it, which the history could not tell from a heartbeat that extends nothing)."""
        self.next_requeue = REQUEUE_EVERY_SECS
        self.requeued: dict[int, int] = {}
        self.next_live_requeue = LIVE_REQUEUE_EVERY_SECS
        self.live_requeues_sent = 0
        self.next_sweep = SWEEP_EVERY_SECS
        self.store = resolve_store("default")
        # A reclaim needs the lease to lapse and a free slot elsewhere; a woken worker needs
        # one guard tick. Both bounds are generous: reaching one is reported, never hidden.
        self.stop_limit = max(10.0, 5 * lease_ttl)
        self.fence_limit = max(10.0, 5 * lease_ttl)
        fleet.next_arm = self._arm_on_restart

    def now(self) -> float:
        return self.clock() - self.started

    # -- the two phases ----------------------------------------------------------------------

    def run_chaos(self) -> None:
        while self.now() < self.plan.duration:
            self.tick(self.now())
            time.sleep(TICK_SECS)
        self.chaos_on = False
        for event in [*self.waiting, *self.due]:
            self.outcome.not_carried_out[event.kind] += 1
            self.fleet.log.add("not_carried_out", kind=event.kind, planned_at=event.at)
        self.waiting, self.due = [], []

    def drain(self, timeout: float, hold: Callable[[], bool] = lambda: False) -> str:
        """Release the rest, wait until nothing is pending and every zombie has its verdict
        (and while ``hold`` says so: the schedules still fire)."""
        last_finished, last_progress, next_check = -1, self.now(), 0.0
        while True:
            now = self.now()
            outstanding = self.tick(now)
            idle = not self.open and not self.settling and not hold()
            if self.pacer.finished_releasing and outstanding == 0 and idle:
                self.fleet.disarm()  # armed with no task left: reported as not reached
                return ""
            if now >= next_check:
                next_check = now + PROGRESS_EVERY_SECS
                finished = self._scalar(queries.FINISHED_COUNT, {"queue": self.queue})
                if finished != last_finished:
                    last_finished, last_progress = finished, now
                elif now - last_progress >= timeout:
                    return f"no task finished for {timeout:g} s; see the worker logs"
            time.sleep(TICK_SECS)

    def tick(self, now: float) -> int:
        """One round; returns how many tasks are outstanding (pending)."""
        self.fleet.reap()
        outstanding = self._scalar(queries.PENDING_COUNT, {"queue": self.queue})
        if not self.pacer.finished_releasing:
            ready = self._scalar(queries.READY_COUNT, {"queue": self.queue})
            released = self.pacer.take(ready, now)
            if released:
                self.release(released)
                outstanding += len(released)
        if self.chaos_on:
            self.requeue_zombie_tasks()
        self.follow_zombies(now)
        if self.chaos_on:
            while self.due and self.due[0].at <= now:
                self.waiting.append(self.due.pop(0))
            self.waiting = [e for e in self.waiting if not self.apply(e, now)]
            if now >= self.next_cancel:
                self.next_cancel = now + CANCEL_EVERY_SECS
                self.cancel_one()
            if now >= self.next_requeue:
                self.next_requeue = now + REQUEUE_EVERY_SECS
                self.requeue_one()
            if now >= self.next_live_requeue:
                self.next_live_requeue = now + LIVE_REQUEUE_EVERY_SECS
                self.requeue_live_one()
            if now >= self.next_sweep:
                self.next_sweep = now + SWEEP_EVERY_SECS
                self.sweep()
        for source in self.sources:
            source.tick(now)
        return outstanding

    # -- planned events ----------------------------------------------------------------------

    def can_break_one(self) -> bool:
        """Breaking one more worker still leaves at least half the fleet working."""
        return self.fleet.working_count() - 1 >= max(1, self.fleet.size // 2)

    def apply(self, event: Planned, now: float) -> bool:
        """Carry out one event; False to try it again at the next tick.

        A kill needs only one other worker working: the killed one is restarted at once (a
        fork), so it leaves the fleet for milliseconds, not for a lease as a zombie does."""
        if event.kind == KILL:
            if self.fleet.working_count() < 2:
                return False
        elif not self.can_break_one():
            return False
        if event.kind == ZOMBIE:
            if event.pause:
                return self.pause_zombie(event)
            return self.stop_zombie(event, now)
        if event.kind == KILL:
            slot = self.fleet.pick(event, self._holds_leases())
            return slot is not None and self.fleet.kill(slot)
        if now - event.at < ARM_ON_RESTART_SECS:
            return False  # a restart may take it first (see _arm_on_restart)
        if not self._may_arm():
            return False
        slot = self.fleet.pick(event, self._holds_leases())
        return slot is not None and self.fleet.arm(slot, event.failpoint_seed)

    def _arm_on_restart(self) -> int | None:
        """The seed of a waiting failpoint for a slot that restarts now, if there is one."""
        if not self._may_arm():
            return None
        for event in self.waiting:
            if event.kind == FAILPOINT:
                self.waiting.remove(event)
                return event.failpoint_seed
        return None

    def _may_arm(self) -> bool:
        """One armed worker at a time, and only while tasks remain for it to reach its point."""
        return self.fleet.armed_count() < MAX_ARMED and not self.pacer.finished_releasing

    def _holds_leases(self) -> Callable[..., bool]:
        leases = self._leases()
        return lambda proc: proc.working() and proc.owner in leases

    # -- operator cancels --------------------------------------------------------------------

    def cancel_one(self) -> None:
        """Cancel one leased task as an operator would: in turn one a working worker holds and
        one a stopped zombie holds (when no zombie holds one, a working worker's).

        The task of a paused zombie's decided write is left alone (that write must meet the
        task under another worker's lease: the epoch guard's case), except for a zombie paused
        at ``after_error_before_fail`` (``STATE_GUARD_POINT``): its task is cancelled first,
        once, so the next claim buries it at the zombie's own epoch and the late write meets a
        finished task, which only the settle statement's state guard refuses.
        """
        self.cancels_sent += 1
        for z in self.open:
            if (
                z.phase is Phase.STOPPED
                and z.pause_point == STATE_GUARD_POINT
                and not z.paused_task_cancelled
            ):
                targets = [
                    t
                    for t in z.paused_tasks
                    if t in z.held and t not in z.reclaimed and t not in self.marked
                ]
                z.paused_task_cancelled = True
                if targets:
                    self._cancel(targets[0])
                    return
        zombie_tasks = [
            task
            for z in self.open
            if z.phase is Phase.STOPPED
            for task in sorted(z.held)
            if task not in z.reclaimed and task not in z.paused_tasks and task not in self.marked
        ]
        if self.cancels_sent % 2 == 0 and zombie_tasks:
            task = zombie_tasks[0]
        else:
            paused = {task for z in self.open for task in z.paused_tasks}
            # a zombie that paused a moment ago is not open yet (SETTLE_SECS): its log names
            # the task of its paused write, which is left alone as an open zombie's is
            for proc, _ in self.settling:
                if proc.paused:
                    paused.update(paused_tasks(proc.child.log_path))
            rows = self._rows(queries.CANCEL_PICK, {"queue": self.queue})
            picks = [row[0] for row in rows if row[0] not in paused and row[0] not in self.marked]
            if not picks:
                return
            task = picks[0]
        self._cancel(task)

    def _cancel(self, task: int) -> None:
        with run_history.acting(CANCEL_ACTOR):
            outcome = cancel(task, using="default")
        if outcome is CancelOutcome.MARKED:
            self.marked.add(task)
        self.outcome.cancels[outcome.value] += 1
        self.fleet.log.add("cancel", task=task, outcome=outcome.value)
        if outcome is CancelOutcome.MARKED:  # a live lease a sweep must leave alone
            self.sweep(after_mark=True)

    # -- operator sweeps ----------------------------------------------------------------------

    def sweep(self, *, after_mark: bool = False) -> None:
        """Sweep the queue as an operator would (see SWEEP_EVERY_SECS)."""
        with run_history.acting(SWEEP_ACTOR):
            buried = self.store.dead_sweep(self.queue)
        self.outcome.sweeps["sweeps"] += 1
        self.outcome.sweeps["after a cancel mark"] += after_mark
        self.outcome.sweeps["buried"] += buried
        if buried:
            self.fleet.log.add("sweep", buried=buried, after_mark=after_mark)

    # -- operator requeues ------------------------------------------------------------------

    def requeue_zombie_tasks(self) -> None:
        """Requeue every task of a stopped zombie that died while it sleeps (see
        REQUEUE_EVERY_SECS)."""
        ids = [task for z in self.open if z.phase is Phase.STOPPED for task in z.held]
        if not ids:
            return
        for (task,) in self._rows(queries.DEAD_AMONG, {"ids": ids}):
            self._requeue(task, "asleep zombie's")

    def requeue_one(self) -> None:
        """Requeue one dead chaos task, the most recently buried one not requeued too often."""
        for (task,) in self._rows(queries.REQUEUE_PICK, {"queue": self.queue}):
            if self.requeued.get(task, 0) < REQUEUE_LIMIT:
                self._requeue(task, "dead")
                return

    def requeue_live_one(self) -> None:
        """Ask the store to requeue a task that is not dead (see LIVE_REQUEUE_EVERY_SECS), the
        kind of target in turn; a kind with no task now gives its turn to the next."""
        seen = dict(self._rows(queries.LIVE_REQUEUE_PICK, {"queue": self.queue}))
        for turn in range(len(LIVE_REQUEUE_TARGETS)):
            what = LIVE_REQUEUE_TARGETS[
                (self.live_requeues_sent + turn) % len(LIVE_REQUEUE_TARGETS)
            ]
            if what in seen:
                break
        else:
            return
        self.live_requeues_sent += 1
        task = seen[what]
        self.outcome.requeue_asks[what] += 1
        with run_history.acting(REQUEUE_ACTOR):
            accepted = self.store.dead_requeue(self.queue, task)
        if accepted:
            self.outcome.requeue_asks["accepted"] += 1
            self.requeued[task] = self.requeued.get(task, 0) + 1
        self.fleet.log.add("requeue_asked", task=task, seen=what, accepted=accepted)

    def _requeue(self, task: int, what: str) -> None:
        if self.requeued.get(task, 0) >= REQUEUE_LIMIT:
            return
        with run_history.acting(REQUEUE_ACTOR):
            revived = self.store.dead_requeue(self.queue, task)
        if revived:
            self.requeued[task] = self.requeued.get(task, 0) + 1
            self.outcome.requeues[what] += 1
            self.fleet.log.add("requeue", task=task, what=what)

    # -- zombies -----------------------------------------------------------------------------

    def stop_zombie(self, event: Planned, now: float) -> bool:
        """Stop a worker that holds leases and note what it holds once it is stopped.

        At most half the workers are stopped at once: the others must take the stopped
        workers' tasks while they sleep.
        """
        if not self._zombie_room():
            return False
        slot = self.fleet.pick(event, self._holds_leases())
        proc = self.fleet.freeze(slot) if slot is not None else None
        if proc is None:
            return False
        self.settling.append((proc, now))
        return True

    def _zombie_room(self) -> bool:
        """At most half the workers stopped (or about to stop themselves) at once."""
        stopping = len(self.open) + len(self.settling) + self.fleet.pausing_count()
        return stopping < max(1, self.fleet.size // 2)

    def pause_zombie(self, event: Planned) -> bool:
        """Replace a worker that holds leases with one that stops itself at its first ack (or,
        by ``event.pause_point``, its first retry or burial).

        Its decision is made and not yet written when it stops; once another worker has claimed
        the task it is continued, and that late write must be refused by the fence: the write a
        random SIGSTOP (mostly inside a handler, then refused by the heartbeat's check in the
        worker itself) seldom sends through the store's guards.
        """
        if not self._zombie_room() or self.pacer.finished_releasing:
            return False
        slot = self.fleet.pick(event, self._holds_leases())
        if slot is None:
            return False
        return self.fleet.arm(slot, None, pause=True, pause_point=event.pause_point)

    def _settle(self, now: float) -> None:
        """Read what each zombie stopped SETTLE_SECS ago holds; continue one holding nothing."""
        for proc, stopped_at in list(self.settling):
            if now - stopped_at < SETTLE_SECS:
                continue
            self.settling.remove((proc, stopped_at))
            params = {"queue": self.queue, "owner": proc.owner}
            # Only the leases it logged: one whose claim's answer it never got (lost in a
            # failover) holds nothing for it to write (its lapse is redelivery, which S1 and S2
            # judge). A task it got but had not logged when stopped is left out too: untested.
            known = claimed_leases(proc.child.log_path)
            leased = self._rows(queries.HELD_BY_OWNER, params)
            rows = [row for row in leased if row[:2] in known]
            unknown = {str(task): epoch for task, epoch, _ in leased if (task, epoch) not in known}
            extra = {"unknown_to_it": unknown} if unknown else {}
            held = {task: epoch for task, epoch, _ in rows}
            paused, proc.paused = proc.paused, False  # a later zombie of it is a SIGSTOP
            if proc.child.returncode is None and held:
                zombie = Zombie(
                    owner=proc.owner,
                    slot=proc.slot,
                    held=held,
                    stopped_at=stopped_at,
                    attempts={task: attempts for task, _, attempts in rows},
                    paused=paused,
                    pause_point=proc.pause_point if paused else "",
                    paused_tasks=paused_tasks(proc.child.log_path) if paused else (),
                )
                self.open.append(zombie)
                self.fleet.log.add("stop", held=zombie.record()["held"], **extra, **proc.fields())
                continue
            # Its last tasks ended as it stopped: nothing to test. Continue it, try again.
            self.fleet.thaw(proc)
            proc.watched = False
            self.fleet.log.add("stop_held_nothing", **extra, **proc.fields())
            if self.chaos_on:
                self.waiting.append(Planned(at=now, kind=ZOMBIE, slot=proc.slot))

    def follow_zombies(self, now: float) -> None:
        self.settling += [(proc, now) for proc in self.fleet.newly_paused()]
        self._settle(now)
        if not self.open:
            return
        ids = [task for z in self.open if z.phase is Phase.STOPPED for task in z.held]
        rows = self._rows(queries.TASK_EPOCHS, {"ids": ids}) if ids else []
        epochs = {row[0]: tuple(row[1:]) for row in rows}
        owners = [z.owner for z in self.open if z.phase is Phase.WOKEN]
        ops: dict[str, dict[tuple[int, int], set[str]]] = {}
        if owners:
            for owner, task, epoch, op in self._rows(queries.FENCED_BY_OWNERS, {"owners": owners}):
                ops.setdefault(owner, {}).setdefault((task, epoch), set()).add(op)
        for zombie in list(self.open):
            self._follow(zombie, now, epochs, ops.get(zombie.owner, {}))

    def _follow(
        self, zombie: Zombie, now: float, epochs: dict, ops: dict[tuple[int, int], set[str]]
    ) -> None:
        proc = self._process(zombie.owner)
        if proc is None:
            zombie.lost(now, "its process ended before the verdict")
        elif zombie.observe_epochs(epochs, now, give_up=self.stop_limit):
            if zombie.phase is Phase.WOKEN:
                self._pin(zombie)
            self.fleet.thaw(proc)
            if zombie.phase is Phase.WOKEN:
                seen = {task: list(epochs[task]) for task in zombie.held if task in epochs}
                self.fleet.log.add(
                    ZOMBIE, reclaimed=zombie.record()["reclaimed"], seen=seen, **proc.fields()
                )
                self._pause_again_if_unleased(zombie, now, epochs)
        else:
            if zombie.pause_point == HEARTBEAT_POINT and not zombie.paused_write_failed:
                zombie.paused_write_failed = heartbeat_failed_after_pause(proc.child.log_path)
            self._unpin_when_landed(zombie, now, ops)
            unwritten: set[int] = set()
            if zombie.woken_at is not None and now - zombie.woken_at >= self.fence_limit:
                unwritten = failed_writes(proc.child.log_path)
            zombie.observe_fenced(
                set(ops), now, give_up=self.fence_limit, ops=ops, unwritten=unwritten
            )
        if not zombie.done:
            return
        self._unpin(zombie, now, "verdict")
        self.open.remove(zombie)
        self.outcome.zombies.append(zombie)
        if proc is not None:
            proc.watched = False
        self.fleet.log.add("zombie_verdict", **zombie.record())
        self.say(zombie.describe())
        if zombie.phase is Phase.NOT_BITTEN and self.chaos_on:  # try it again
            slot = (zombie.slot + 1) % self.fleet.size
            self.waiting.append(Planned(at=now, kind=ZOMBIE, slot=slot))

    def _pause_again_if_unleased(self, zombie: Zombie, now: float, epochs: dict) -> None:
        """A zombie woken at an epoch guard's point whose paused write's task is finished, not
        pending under a new lease: plan another zombie paused at that point (see
        EPOCH_GUARD_POINTS)."""
        if not self.chaos_on or self.epoch_guard_retries >= EPOCH_GUARD_RETRIES:
            return
        tasks = write_meets_no_lease(zombie, epochs)
        if not tasks:
            return
        self.epoch_guard_retries += 1
        slot = (zombie.slot + 1) % self.fleet.size
        point = zombie.pause_point
        self.waiting.append(Planned(at=now, kind=ZOMBIE, slot=slot, pause=True, pause_point=point))
        states = ", ".join(f"{task} {epochs[task][2]}" for task in tasks)
        self.fleet.log.add("pause_again", zombie=zombie.owner, point=point, tasks=tasks)
        self.say(
            f"zombie {zombie.owner}: its write paused at {point} will meet a finished task "
            f"({states}), not another worker's lease; another zombie pauses there"
        )

    # -- pinning a zombie's new holders -------------------------------------------------------

    def _pin(self, zombie: Zombie) -> None:
        """Stop the workers that now hold the zombie's reclaimed tasks, so that its late write
        meets each task under the new holder's lease (the epoch guard's case) instead of racing
        that holder's own ack (a task it finished refuses the write by its state alone). The
        rows are read once the holders stopped; only a task still held then is pinned."""
        tasks = sorted(zombie.reclaimed)
        if not tasks:
            return
        rows = self._rows(queries.TASK_LEASES, {"ids": tasks})
        holders = {
            task: owner
            for task, state, epoch, owner, *_ in rows
            if state == "pending" and owner and owner != zombie.owner and epoch > zombie.held[task]
        }
        stopped = set()
        for owner in set(holders.values()):
            proc = self._process(owner)
            if proc is not None and (proc.pinned or self.fleet.pin(proc)):
                stopped.add(owner)
        if not stopped:
            return
        time.sleep(PIN_SETTLE_SECS)
        for row in self._rows(queries.TASK_LEASES, {"ids": tasks}):
            task, state, epoch, owner = row[:4]
            if holders.get(task) in stopped and state == "pending" and owner == holders[task]:
                zombie.pinned[task] = tuple(row)
                zombie.pinned_holders[task] = owner
        zombie.pinned_at = self.now()
        self.fleet.log.add("pin", zombie=zombie.owner, tasks=zombie.record()["pinned"])
        if not zombie.pinned:  # every holder finished its task before it stopped
            self._unpin(zombie, self.now(), "nothing held")

    def _unpin_when_landed(
        self, zombie: Zombie, now: float, ops: dict[tuple[int, int], set[str]]
    ) -> None:
        """Continue the pinned holders once the zombie's write to each pinned task landed:
        refused and recorded, or applied (the row changed), or the pin's time is up. A paused
        zombie's write is the one it paused before (its heartbeat, refused first, is not)."""
        if zombie.pinned_at is None:
            return
        if now - zombie.pinned_at >= PIN_LIMIT_LEASES * self.lease_ttl:
            self._unpin(zombie, now, "time up")
            return
        rows = self._rows(queries.TASK_LEASES, {"ids": sorted(zombie.pinned)})
        current = {row[0]: tuple(row) for row in rows}
        landed = all(
            zombie.write_refused(ops.get((task, zombie.held[task]), set()))
            or current.get(task) != before
            for task, before in zombie.pinned.items()
        )
        if landed:
            self._unpin(zombie, now, "its write landed")

    def _unpin(self, zombie: Zombie, now: float, why: str) -> None:
        if zombie.pinned_at is None:
            return
        zombie.pinned_at = None
        still = {
            o
            for z in self.open
            if z is not zombie and z.pinned_at is not None
            for o in z.pinned_holders.values()
        }
        for owner in set(zombie.pinned_holders.values()) - still:
            proc = self._process(owner)
            if proc is not None:
                self.fleet.unpin(proc)
        self.fleet.log.add("unpin", zombie=zombie.owner, why=why)

    def _process(self, owner: str):
        for proc in self.fleet.alive():
            if proc.owner == owner:
                return proc
        return None

    def close(self) -> None:
        for zombie in self.open:
            self._unpin(zombie, self.now(), "the run ended")
        for proc, _ in self.settling:
            self.fleet.thaw(proc)
        self.settling = []
        for zombie in self.open:
            zombie.lost(self.now(), "the run ended before the verdict")
            self.outcome.zombies.append(zombie)
            self.fleet.log.add("zombie_verdict", **zombie.record())
            self.say(zombie.describe())
        self.open = []
        for source in self.sources:
            source.close()

    # -- the queue database ------------------------------------------------------------------

    def _leases(self) -> dict[str, list[int]]:
        return dict(self._rows(queries.LEASES_BY_OWNER, {"queue": self.queue}))

    def _rows(self, sql: str, params: dict) -> list[tuple]:
        with connections["default"].cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()

    def _scalar(self, sql: str, params: dict) -> int:
        return self._rows(sql, params)[0][0]
