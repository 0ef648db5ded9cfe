"""The workers of a chaos run: one process per slot, restarted when it dies, broken on purpose.

Every chaos event that is counted is counted from what the harness observed, never from what it
meant to do: a kill when the process it sent SIGKILL to exits of SIGKILL, a failpoint when an
armed worker exits of SIGABRT (it reached its failpoint), a zombie when a stopped worker's task
was claimed by another worker while it slept (see ``zombies``). A signal that finds its process
gone counts nothing.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import CommandError, call_command

from chaos_project import chaos_kinds
from chaos_project.chaos.plan import (
    FAILPOINT,
    FAILPOINT_PROBABILITY,
    KILL,
    KINDS,
    PAUSE_POINT,
    Planned,
)
from chaos_project.kit.pidfd import Child, describe_exit
from rivet.errors import RivetError

EXIT_BAD_OPTION = 2  # rivet_worker: a bad option or RIVET_FAILPOINT; restarting cannot help
STOP_TIMEOUT_SECS = 20.0


class FleetError(RivetError):
    """A worker cannot run at all (it refused its options); the message carries its log."""


class EventLog:
    """What happened during a run, one JSON line per event in ``path`` as it happens."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.clock = clock
        self.started = clock()
        self.records: list[dict[str, Any]] = []

    def add(self, event: str, **fields: Any) -> dict[str, Any]:
        record = {"t": round(self.clock() - self.started, 3), "event": event, **fields}
        self.records.append(record)
        with self.path.open("a") as out:
            out.write(json.dumps(record) + "\n")
        return record

    def chaos_counts(self) -> dict[str, int]:
        return count_chaos(self.records)

    def armed_counts(self) -> tuple[int, int]:
        """(workers started armed, armed workers that reached their failpoint)."""
        armed = sum(1 for r in self.records if r["event"] == "start" and r["armed"])
        return armed, sum(1 for r in self.records if r["event"] == FAILPOINT)

    def unexpected_exits(self) -> list[dict[str, Any]]:
        """Exits the harness did not cause (a SIGTERM it sent may end a worker that was still
        starting, before its handler was installed: that one is expected)."""
        return [r for r in self.records if r["event"] == "exit" and not r["expected"]]


def count_chaos(records: list[dict[str, Any]]) -> dict[str, int]:
    """Chaos events by kind (kill, failpoint, zombie) in an event log's records."""
    seen = Counter(r["event"] for r in records)
    return {kind: seen[kind] for kind in KINDS}


def worker_main(args: list[str], env: dict[str, str]) -> int:
    """A forked worker: this environment, then ``rivet_worker ARGS``; returns its exit code."""
    os.environ.clear()
    os.environ.update(env)
    # Read from the environment when the settings were imported, in the harness: set again.
    settings.EFFECT_SERVICE_URL = env["EFFECT_SERVICE_URL"]
    chaos_kinds.use_handlers(env.get(chaos_kinds.HANDLERS_ENV))  # registered at import, too
    try:
        call_command("rivet_worker", *args)
    except CommandError as exc:
        sys.stderr.write(f"CommandError: {exc}\n")
        return exc.returncode
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    return 0


def read_event_log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass
class WorkerProcess:
    slot: int
    owner: str
    child: Child
    armed: bool = False
    kill_sent: bool = False
    term_sent: bool = False
    frozen: bool = False  # SIGSTOPped, not yet continued
    pinned: bool = False  # SIGSTOPped briefly as the new holder of a zombie's task
    watched: bool = False  # a zombie whose verdict is still open: leave it alone
    pausing: bool = False  # armed to stop itself at its point (a pausing zombie), not yet stopped
    paused: bool = False  # it stopped itself at its point
    pause_point: str = PAUSE_POINT  # where a pausing worker stops itself
    stalling: bool = False  # armed to stop itself in its scheduler pass (scheduler-stall)
    started: bool = False  # its log says worker_started: it claims tasks

    def ready(self) -> bool:
        """True once the worker has started (booting takes a second or more on a busy box)."""
        if not self.started:
            try:
                with self.child.log_path.open("rb") as log:
                    self.started = b'"worker_started"' in log.read(4096)
            except OSError:
                return False
        return self.started

    def working(self) -> bool:
        """Started, running, and not being broken: it can take another worker's tasks."""
        gone = self.child.returncode is not None or self.kill_sent or self.term_sent
        return not gone and not self.frozen and not self.pinned and self.ready()

    def fields(self) -> dict[str, Any]:
        return {"slot": self.slot, "owner": self.owner, "pid": self.child.pid}

    def own_exit(self) -> str | None:
        """The reason the worker logged for ending on its own (stuck handlers, or a stop with
        a non-zero exit code), if its log holds one: a signal that ended it afterwards (a
        planned kill) must not hide that it was leaving anyway."""
        try:
            text = self.child.log_path.read_text(errors="replace")
        except OSError:
            return None
        for raw in reversed(text.splitlines()):
            if '"event"' not in raw:
                continue
            try:
                record = json.loads(raw[raw.index("{") :])
            except ValueError:
                continue
            if record.get("event") == "too_many_abandoned":
                return f"gave up: {record.get('abandoned', '?')} handler(s) stuck"
            if record.get("event") == "worker_stopped" and record.get("exit_code"):
                return f"stopping with exit {record['exit_code']}"
        return None


class Fleet:
    """``size`` worker slots running ``rivet_worker WORKER_ARGS``.

    Each worker is forked from this process and runs the rivet_worker command there (Django is
    loaded already, so a restart takes milliseconds, where a new interpreter takes seconds on a
    busy machine and the fleet would spend the run booting). With ``command`` (an argv such as
    ``python manage.py rivet_worker``) each worker is started from it instead.
    """

    def __init__(
        self,
        *,
        size: int,
        worker_args: list[str],
        env: dict[str, str],
        log_dir: Path,
        log: EventLog,
        clock: Callable[[], float] = time.monotonic,
        command: list[str] | None = None,
    ) -> None:
        self.size = size
        self.command = command
        self.worker_args = worker_args
        self.env = env
        self.log_dir = log_dir
        self.log = log
        self.clock = clock
        self.slots: list[WorkerProcess | None] = [None] * size
        self.retiring: list[WorkerProcess] = []
        self.generations = [0] * size
        self.restart = True
        #: Consulted when a slot restarts: a failpoint seed arms the new worker.
        self.next_arm: Callable[[], int | None] = lambda: None

    # -- starting ----------------------------------------------------------------------------

    def start_all(self) -> None:
        for slot in range(self.size):
            self.start(slot)

    def start(
        self,
        slot: int,
        failpoint_seed: int | None = None,
        *,
        pause: bool = False,
        pause_point: str = PAUSE_POINT,
        stall_point: str | None = None,
    ) -> WorkerProcess:
        """Start the slot's worker: armed to abort at its failpoint (``failpoint_seed``), or to
        stop itself there once (``pause``: a pausing zombie; ``stall_point``: a worker the
        scheduler-stall fault follows, not a zombie), or clean."""
        self.generations[slot] += 1
        owner = f"chaos-w{slot}-g{self.generations[slot]}"
        env = dict(self.env)
        if failpoint_seed is not None:
            env["RIVET_FAILPOINT"] = f"after_effect_before_ack:{FAILPOINT_PROBABILITY}"
            env["RIVET_FAILPOINT_SEED"] = str(failpoint_seed)
        if pause or stall_point:
            env["RIVET_FAILPOINT"] = f"{stall_point or pause_point}:1.0"
            env["RIVET_FAILPOINT_ACTION"] = "stop"
        args = [*self.worker_args, "--owner", owner]
        log_path = self.log_dir / f"{owner}.log"
        if self.command is None:
            child = Child(env=env, log_path=log_path, main=lambda: worker_main(args, env))
        else:
            child = Child([*self.command, *args], env=env, log_path=log_path)
        armed = failpoint_seed is not None
        proc = WorkerProcess(
            slot=slot,
            owner=owner,
            child=child,
            armed=armed,
            pausing=pause,
            pause_point=pause_point,
            stalling=stall_point is not None,
        )
        self.slots[slot] = proc
        point = pause_point if pause else None
        self.log.add(
            "start",
            armed=armed,
            pausing=pause,
            pause_point=point,
            stall_point=stall_point,
            **proc.fields(),
        )
        return proc

    # -- observing ---------------------------------------------------------------------------

    def alive(self) -> list[WorkerProcess]:
        return [p for p in self.slots if p is not None and p.child.returncode is None]

    def frozen_count(self) -> int:
        return sum(1 for p in self.alive() if p.frozen)

    def working_count(self) -> int:
        return sum(1 for p in self.slots if p is not None and p.working())

    def armed_count(self) -> int:
        return sum(1 for p in self.alive() if p.armed)

    def pausing_count(self) -> int:
        return sum(1 for p in self.alive() if p.pausing)

    def newly_paused(self) -> list[WorkerProcess]:
        """Pausing workers that have stopped themselves at their point: now frozen zombies."""
        paused = [p for p in self.alive() if p.pausing and p.child.stopped()]
        for proc in paused:
            proc.pausing = False
            proc.paused = proc.frozen = proc.watched = True
            self.log.add("paused", point=proc.pause_point, **proc.fields())
        return paused

    def reap(self) -> None:
        """Reap exited workers, count what killed them, and restart their slots."""
        for proc in list(self.retiring):
            if proc.child.poll() is not None:
                self.retiring.remove(proc)
                self._exited(proc)
        for slot, proc in enumerate(self.slots):
            if proc is not None and proc.child.poll() is not None:
                self.slots[slot] = None
                self._exited(proc)
                if self.restart:
                    self.start(slot, failpoint_seed=self.next_arm())

    def _exited(self, proc: WorkerProcess, *, at_stop: bool = False) -> None:
        code = proc.child.returncode
        if code == -signal.SIGKILL and proc.kill_sent:
            self.log.add(KILL, **proc.fields())
            own = proc.own_exit()
            if own is not None:  # it was leaving on its own when the kill came
                status = f"{own}, then {describe_exit(code)} by the harness"
                self.log.add("exit", status=status, expected=False, **proc.fields())
        elif code == -signal.SIGABRT and proc.armed:
            self.log.add(FAILPOINT, **proc.fields())
        else:
            expected = code == 0 or (proc.term_sent and code == -signal.SIGTERM)
            status = describe_exit(code)
            self.log.add("exit", status=status, expected=expected, **proc.fields())
        if code == EXIT_BAD_OPTION and not at_stop:
            raise FleetError(
                f"worker {proc.owner} refused its options (exit 2):\n{proc.child.log_tail()}"
            )

    # -- breaking ----------------------------------------------------------------------------

    def pick(self, planned: Planned, eligible: Callable[[WorkerProcess], bool]) -> int | None:
        """The planned slot if its worker is eligible, else the next eligible one in turn.

        A worker that is stopped, armed, watched as a zombie or being killed or retired is
        never eligible: each event must be able to finish what it started.
        """
        for step in range(self.size):
            proc = self.slots[(planned.slot + step) % self.size]
            if proc is not None and self._free(proc) and eligible(proc):
                return proc.slot
        return None

    @staticmethod
    def _free(proc: WorkerProcess) -> bool:
        busy = proc.frozen or proc.pinned or proc.armed or proc.pausing or proc.watched
        busy = busy or proc.kill_sent or proc.term_sent or proc.stalling
        return proc.child.returncode is None and not busy

    def is_free(self, proc: WorkerProcess) -> bool:
        """Whether no event is using the worker (see ``pick``)."""
        return self._free(proc)

    def arm_stall(self, slot: int, point: str) -> WorkerProcess | None:
        """Retire the slot's worker for one that stops itself at ``point`` (scheduler-stall)."""
        proc = self.slots[slot]
        if proc is None or not self._terminate(proc):
            return None
        self.retiring.append(proc)
        return self.start(slot, stall_point=point)

    def kill(self, slot: int) -> bool:
        proc = self.slots[slot]
        if proc is None or not self._signal(proc, signal.SIGKILL):
            return False
        proc.kill_sent = True
        return True

    def arm(
        self,
        slot: int,
        failpoint_seed: int | None,
        *,
        pause: bool = False,
        pause_point: str = PAUSE_POINT,
    ) -> bool:
        """Retire the slot's worker (SIGTERM: it finishes its tasks) for an armed one (or, with
        ``pause``, one that stops itself at its point)."""
        proc = self.slots[slot]
        if proc is None or not self._terminate(proc):
            return False
        self.retiring.append(proc)
        self.start(slot, failpoint_seed=failpoint_seed, pause=pause, pause_point=pause_point)
        return True

    def freeze(self, slot: int) -> WorkerProcess | None:
        """SIGSTOP the slot's worker; the process when it is really stopped."""
        proc = self.slots[slot]
        if proc is None or not self._signal(proc, signal.SIGSTOP):
            return None
        if proc.child.poll() is not None:  # it had exited already: nothing was stopped
            return None
        proc.frozen = proc.watched = True
        return proc

    def pin(self, proc: WorkerProcess) -> bool:
        """SIGSTOP a working worker for a moment (it holds a zombie's task); True if stopped.

        Never a worker that is to stop itself at a failpoint (its own stop would be taken for
        this one, a pausing zombie's or a scheduler stall's), nor one already stopped or on its
        way out.
        """
        if not proc.working() or proc.pausing or proc.paused or proc.stalling:
            return False
        if not self._signal(proc, signal.SIGSTOP) or proc.child.poll() is not None:
            return False
        proc.pinned = True
        return True

    def unpin(self, proc: WorkerProcess) -> None:
        """SIGCONT a pinned worker."""
        if proc.pinned:
            proc.pinned = False
            self._signal(proc, signal.SIGCONT)

    def thaw(self, proc: WorkerProcess) -> None:
        """SIGCONT a stopped worker."""
        if proc.frozen:
            proc.frozen = False
            if self._signal(proc, signal.SIGCONT):
                self.log.add("thaw", **proc.fields())

    def thaw_all(self) -> None:
        for proc in self.alive():
            self.unpin(proc)
            self.thaw(proc)

    def disarm(self) -> None:
        """Replace every armed (or still pausing) worker with a clean one."""
        for proc in self.alive():
            if (proc.armed or proc.pausing or proc.stalling) and self._terminate(proc):
                self.retiring.append(proc)
                self.start(proc.slot)

    def _continue_if_it_pauses(self, proc: WorkerProcess) -> None:
        """A pausing worker told to stop may still reach its point as it finishes its tasks
        and stop itself there: continue it (its point fires once), so it can exit."""
        deadline = self.clock() + STOP_TIMEOUT_SECS
        while proc.child.poll() is None and self.clock() < deadline:
            if proc.child.stopped():
                proc.child.send(signal.SIGCONT)
                return
            time.sleep(0.05)

    def _terminate(self, proc: WorkerProcess) -> bool:
        proc.term_sent = self._signal(proc, signal.SIGTERM)
        return proc.term_sent

    def _signal(self, proc: WorkerProcess, sig: signal.Signals) -> bool:
        sent = proc.child.send(sig)
        self.log.add("signal", signal=sig.name, sent=sent, **proc.fields())
        return sent

    # -- stopping ----------------------------------------------------------------------------

    def stop_all(self) -> None:
        """SIGTERM every worker through its pidfd and reap it (SIGKILL if it will not stop)."""
        self.restart = False
        self.thaw_all()  # a stopped process would not act on SIGTERM
        procs = [p for p in [*self.slots, *self.retiring] if p is not None]
        for proc in procs:
            if not proc.term_sent:  # a second SIGTERM makes a worker exit at once (128 + 15)
                proc.term_sent = proc.child.terminate()
        for proc in procs:
            if proc.pausing:
                self._continue_if_it_pauses(proc)
            proc.child.stop(STOP_TIMEOUT_SECS, terminated=True)
        self.retiring.clear()
        self.slots = [None] * self.size
        for proc in procs:
            self._exited(proc, at_stop=True)
