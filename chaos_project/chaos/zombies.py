"""A zombie event from SIGSTOP to its verdict: stopped, reclaimed by another worker, woken, fenced.

A zombie is a worker stopped (SIGSTOP) while it holds leases. It is kept stopped until another
worker has claimed one of its tasks, which the harness sees as that task's ``attempts`` rising
in the queue database (every claim adds one, whatever it does to the epoch; no fixed sleep: the
wait is as long as this machine needs), or until one of its tasks was finished without it: a
claim that met it with its attempts used up buried it, or an operator's cancel did, at the epoch
the zombie holds. Its late write then meets a finished task, and the state guard must refuse it.
Then it is continued (SIGCONT); its late write for
*every* task claimed from it must be refused by the fence and recorded in
``rivet_fenced_write`` under its owner and its stale epoch. A claim that did not raise the
epoch is recorded too: then the stale write cannot be refused.

Outcomes:

- ``fenced``: a stale write was refused and recorded for each task claimed from it. The only
  good ending.
- ``unfenced``: its tasks were claimed again, it woke, and for at least one of them no refused
  write was recorded within the bound: a stale write went through (or was never made). F2
  fails.
- ``not bitten``: nobody claimed its tasks while it was stopped (within the bound), or it held
  nothing once stopped. Nothing was tested: reported, and the zombie event is tried again.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: The failpoint a zombie pauses at just before a heartbeat, and the op its refusal is recorded as.
HEARTBEAT_POINT = "before_heartbeat"
HEARTBEAT_OP = "beat"

#: How long a paused zombie waits after its first task was claimed for the others to be.
PAUSE_WAIT_SECS = 2.0


class Phase(enum.Enum):
    STOPPED = "stopped"
    """SIGSTOPped, holding ``held``; waiting for another worker to claim one of them."""
    WOKEN = "woken"
    """Continued after a reclaim; waiting for its refused write to be recorded."""
    FENCED = "fenced"
    UNFENCED = "unfenced"
    NOT_BITTEN = "not bitten"
    UNWRITTEN = "could not write"
    """Its tasks were claimed again and it woke, but its late writes never reached the database
    (the worker logged ``write_failed`` for each task missing a refusal: the server was
    restarting): nothing of it was refused, nor applied (the row check judges that apart)."""


FINAL = frozenset({Phase.FENCED, Phase.UNFENCED, Phase.NOT_BITTEN, Phase.UNWRITTEN})


@dataclass
class Zombie:
    """One stopped worker and the leases it held when it stopped: {task id: epoch}."""

    owner: str
    slot: int
    held: dict[int, int]
    stopped_at: float
    attempts: dict[int, int] = field(default_factory=dict)
    """Each held task's attempts when it stopped (a later claim raises them)."""
    phase: Phase = Phase.STOPPED
    reclaimed: dict[int, int] = field(default_factory=dict)
    """Held tasks another worker claimed while it slept: {task id: the epoch it then held}."""
    fenced: set[int] = field(default_factory=set)
    """Reclaimed tasks whose stale write was refused and recorded."""
    paused: bool = False
    """It stopped itself at a failpoint (its late write is decided), not by the harness's
    SIGSTOP."""
    pause_point: str = ""
    """Where a paused zombie stopped: ``after_effect_before_ack``, ``after_error_before_fail``,
    ``before_flush`` (two or more decisions about to be written in one statement) or
    ``before_heartbeat``."""
    paused_tasks: tuple[int, ...] = ()
    """The tasks a paused zombie's decided write is for (from its ``failpoint_fired`` line)."""
    pinned: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    """Reclaimed tasks whose new holder the harness stopped while this zombie's late write
    landed: {task id: the row as it was then}. The write meets a lease another worker holds,
    not a task that holder finished meanwhile (which the state guard would refuse whatever the
    epoch guard did)."""
    pinned_holders: dict[int, str] = field(default_factory=dict)
    """{task id: the owner of the new holder that was stopped}."""
    pinned_at: float | None = None
    paused_task_cancelled: bool = False
    """The harness cancelled the task of its decided write (a zombie paused at
    ``after_error_before_fail``: the state guard's case)."""
    paused_write_failed: bool = False
    """A zombie paused at a heartbeat whose heartbeat, once woken, failed to reach the database
    (``heartbeat_failed`` in its log): nothing could refuse it, so the refusal of the write that
    follows it (its guard's next heartbeat, or the decision) stands for it."""
    first_reclaim_at: float | None = None
    woken_at: float | None = None
    ended_at: float | None = None
    note: str = ""

    @property
    def done(self) -> bool:
        return self.phase in FINAL

    def observe_epochs(
        self, rows: Mapping[int, tuple[Any, ...]], now: float, *, give_up: float
    ) -> bool:
        """Note the held tasks' (epoch, attempts[, state]) now; True when the zombie should be
        continued.

        ``give_up``: seconds stopped after which it is continued even if nothing was
        reclaimed (then it did not bite, and the event is tried again).
        """
        if self.phase is not Phase.STOPPED:
            return False
        self.reclaimed = {
            task: rows[task][0]
            for task, epoch in self.held.items()
            if task in rows and self._claimed_since(task, epoch, *rows[task])
        }
        if self.reclaimed and self.first_reclaim_at is None:
            self.first_reclaim_at = now
        if self.reclaimed and self._ready_to_wake(now):
            self.phase, self.woken_at = Phase.WOKEN, now
            return True
        if now - self.stopped_at >= give_up:
            self._end(Phase.NOT_BITTEN, now, f"nobody claimed its tasks in {give_up:g} s")
            return True
        return False

    def _ready_to_wake(self, now: float) -> bool:
        """A SIGSTOPped zombie wakes at the first reclaim. A paused one holds a write for one of
        its tasks, which need not be the first one taken: it wakes once that task was taken
        (when its log named it), or every task it holds was (they lapse together), or
        PAUSE_WAIT_SECS after the first, so that its write meets the guard instead of a lease
        that is still its own, and meets it soon: a task the new holder finished meanwhile
        would refuse the write by its state whatever the epoch guard did."""
        if not self.paused or len(self.reclaimed) == len(self.held):
            return True
        waiting_for = [task for task in self.paused_tasks if task in self.held]
        if waiting_for and all(task in self.reclaimed for task in waiting_for):
            return True  # its write meets the task while the new holder may still hold it
        assert self.first_reclaim_at is not None
        return now - self.first_reclaim_at >= PAUSE_WAIT_SECS

    def _claimed_since(
        self,
        task: int,
        epoch: int,
        now_epoch: int,
        now_attempts: int,
        state: str = "pending",
        settled_by: str | None = None,
    ) -> bool:
        """Another worker claimed the task, or something finished it (a claim's burial, a
        cancel) while this zombie could not write. A task its own write finished (a flush sent
        just before the stop that committed after the harness read what it held, on a busy
        server) was not taken from it: it simply holds it no more."""
        if state != "pending":
            return not (settled_by == self.owner and now_epoch == epoch)
        if task in self.attempts and now_attempts > self.attempts[task]:
            return True
        # An operator's requeue starts the attempts again; a claim after it still raises the
        # epoch (a store whose claims do not is caught by H4 and the per-task fence check).
        return now_epoch > epoch

    def observe_fenced(
        self,
        fenced: set[tuple[int, int]],
        now: float,
        *,
        give_up: float,
        ops: Mapping[tuple[int, int], set[str]] | None = None,
        unwritten: set[int] | frozenset[int] = frozenset(),
    ) -> None:
        """Note the (task, epoch) writes of this owner the fence refused; decide when due.

        Fenced once every reclaimed task has its refused write; ``give_up``: seconds after
        waking before a zombie still missing one is judged unfenced. ``ops`` (the refused
        writes' ops by (task, epoch)) lets a zombie paused at a heartbeat insist that the
        heartbeat itself was refused: its handler's ack, refused later, would hide a heartbeat
        that was answered "held". ``unwritten``: tasks whose write the worker logged as failed
        (the database did not answer): a zombie missing only those could not write.
        """
        if self.phase is not Phase.WOKEN:
            return
        self.fenced = {
            task
            for task in self.reclaimed
            if (task, self.held[task]) in fenced and self._refused_as_paused(task, ops)
        }
        missing = sorted(set(self.reclaimed) - self.fenced)
        if not missing:
            refused = _ids(sorted(self.fenced))
            self._end(Phase.FENCED, now, f"stale write refused for task {refused}")
        elif now - self.woken_at >= give_up and set(missing) <= unwritten:
            self._end(
                Phase.UNWRITTEN,
                now,
                f"task {_ids(missing)} claimed again; its write for it failed to reach the "
                "database (write_failed in its log), so the fence was not tested there",
            )
        elif now - self.woken_at >= give_up:
            refused = f" (refused: {_ids(sorted(self.fenced))})" if self.fenced else ""
            self._end(
                Phase.UNFENCED,
                now,
                f"task {_ids(missing)} claimed again{self._same_epoch(missing)}, and no refused "
                f"write was recorded for it within {give_up:g} s of waking{refused}",
            )

    def _refused_as_paused(self, task: int, ops: Mapping[tuple[int, int], set[str]] | None) -> bool:
        """A paused zombie: the refused write of a task its paused write was for must be that
        write (``write_refused``), not only a heartbeat its guard sent first, nor, for one
        paused at a heartbeat, only its handler's later ack."""
        if ops is None or not self.paused or task not in self.paused_tasks:
            return True
        recorded = ops.get((task, self.held[task]), set())
        if self.pause_point == HEARTBEAT_POINT and self.reclaimed[task] <= self.held[task]:
            # Finished under its own epoch (a cancel, a claim's burial): nobody else holds it,
            # so the refused heartbeat is not recorded; the decision that follows is.
            return bool(recorded)
        return self.write_refused(recorded)

    def write_refused(self, ops: set[str]) -> bool:
        """Whether these recorded ops (for one of its tasks) hold the refusal of the write it
        stopped before: a heartbeat's for a zombie paused at one; for one paused at an ack, a
        retry or a flush, a decision's (its woken guard may send a refused heartbeat first); any
        for a zombie the harness stopped."""
        if not self.paused or not self.pause_point:
            return bool(ops)
        if self.pause_point == HEARTBEAT_POINT:
            return HEARTBEAT_OP in ops or (self.paused_write_failed and bool(ops))
        return bool(ops - {HEARTBEAT_OP})

    def _same_epoch(self, tasks: list[int]) -> str:
        same = [task for task in tasks if self.reclaimed[task] <= self.held[task]]
        return f" (task {_ids(same)} without a new epoch)" if same else ""

    def lost(self, now: float, why: str) -> None:
        """The process ended before a verdict (killed by hand, or the run ended)."""
        if not self.done:
            self._end(Phase.NOT_BITTEN if self.phase is Phase.STOPPED else Phase.UNFENCED, now, why)

    def _end(self, phase: Phase, now: float, note: str) -> None:
        self.phase, self.ended_at, self.note = phase, now, note

    def describe(self) -> str:
        held = ", ".join(f"{task}@{epoch}" for task, epoch in sorted(self.held.items()))
        stopped = (self.woken_at or self.ended_at or self.stopped_at) - self.stopped_at
        how = f"paused at {self.pause_point or 'its failpoint'}" if self.paused else "stopped"
        pinned = ""
        if self.pinned:
            pinned = f"; new holder of {_ids(sorted(self.pinned))} held while its write landed"
        return (
            f"zombie {self.owner}: held {held}; {how} {stopped:.1f} s{pinned}; "
            f"{self.phase.value}: {self.note}"
        )

    def record(self) -> dict[str, object]:
        return {
            "owner": self.owner,
            "held": {str(task): epoch for task, epoch in self.held.items()},
            "reclaimed": {str(task): epoch for task, epoch in self.reclaimed.items()},
            "fenced": sorted(self.fenced),
            "paused": self.paused,
            "pause_point": self.pause_point if self.paused else None,
            "paused_tasks": list(self.paused_tasks),
            "pinned": {str(task): owner for task, owner in self.pinned_holders.items()},
            "outcome": self.phase.value,
            "note": self.note,
        }


def _ids(tasks: list[int]) -> str:
    return ", ".join(str(task) for task in tasks)
